//go:build tools

// Package tools pins kube-router's command, which scripts/kube-toolchain.sh builds.
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
