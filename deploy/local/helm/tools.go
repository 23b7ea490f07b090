//go:build tools

// Package tools pins helm's command for deploy/local/build.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
