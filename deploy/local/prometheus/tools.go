//go:build tools

package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	// promtool: `promtool test rules` runs deploy/monitoring's rule unit
	// tests (tests/monitoring.rs).
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
