//go:build tools

// The command scripts/kube-toolchain.sh builds.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
