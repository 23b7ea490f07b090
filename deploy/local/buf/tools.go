//go:build tools

// Package tools pins buf's command for deploy/local/build.
package tools

import _ "github.com/bufbuild/buf/cmd/buf"
