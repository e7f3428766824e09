//go:build tools

// The command scripts/kube-toolchain.sh builds.
package tools

import _ "go.etcd.io/etcd/server/v3"
