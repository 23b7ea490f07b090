//go:build tools

package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
