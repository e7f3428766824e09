//go:build tools

// Package tools names the Kueue manager so that go.mod and go.sum pin it.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
