// promcheck checks shardcron's Prometheus alert rules and Grafana dashboard
// (deploy/monitoring) as Prometheus itself reads them, and prints the metric
// names they query, for tests/monitoring.rs to compare with the names the
// controller exports.
//
//	promcheck rules FILE       a rule file, validated as promtool does
//	                           (rulefmt: YAML, fields, PromQL, templates)
//	promcheck dashboard FILE   every target's expr in a Grafana dashboard,
//	                           Grafana's $variables replaced, parsed as PromQL
//
// Output: one JSON object, {"queries": N, "names": [...]}; exit 1 with the
// errors on stderr when anything does not parse.
package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: promcheck rules|dashboard FILE")
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	var exprs []string
	var err error
	switch os.Args[1] {
	case "rules":
		exprs, err = ruleExprs(os.Args[2], p)
	case "dashboard":
		exprs, err = dashboardExprs(os.Args[2])
	default:
		err = fmt.Errorf("unknown kind %q (rules or dashboard)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "promcheck: %s: %v\n", os.Args[2], err)
		os.Exit(1)
	}
	names := map[string]bool{}
	failed := false
	for _, expr := range exprs {
		parsed, err := p.ParseExpr(expr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "promcheck: %s: %q: %v\n", os.Args[2], expr, err)
			failed = true
			continue
		}
		parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
			if selector, ok := node.(*parser.VectorSelector); ok && selector.Name != "" {
				names[selector.Name] = true
			}
			return nil
		})
	}
	if failed {
		os.Exit(1)
	}
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	out, _ := json.Marshal(map[string]any{"queries": len(exprs), "names": sorted})
	fmt.Println(string(out))
}

// ruleExprs validates a rule file as promtool's `check rules` does and
// returns its expressions.
func ruleExprs(file string, p parser.Parser) ([]string, error) {
	groups, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, fmt.Errorf("%v", errs)
	}
	var exprs []string
	for _, group := range groups.Groups {
		if len(group.Rules) == 0 {
			return nil, fmt.Errorf("group %q has no rules", group.Name)
		}
		for _, rule := range group.Rules {
			exprs = append(exprs, rule.Expr)
		}
	}
	if len(exprs) == 0 {
		return nil, fmt.Errorf("no rules")
	}
	return exprs, nil
}

// Grafana's variables: $__rate_interval and friends are durations, the
// others label values (inside quotes in these queries).
var (
	intervalVariable = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)
	otherVariable    = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}?`)
)

type panel struct {
	Title   string  `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// dashboardExprs returns every panel target's query, rows' panels included,
// with Grafana's variables replaced so that Prometheus' parser reads them.
func dashboardExprs(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var dashboard struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dashboard); err != nil {
		return nil, err
	}
	var exprs []string
	var walk func([]panel) error
	walk = func(panels []panel) error {
		for _, p := range panels {
			for _, target := range p.Targets {
				if target.Expr == "" {
					return fmt.Errorf("panel %q has a target without expr", p.Title)
				}
				expr := intervalVariable.ReplaceAllString(target.Expr, "5m")
				exprs = append(exprs, otherVariable.ReplaceAllString(expr, "x"))
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(dashboard.Panels); err != nil {
		return nil, err
	}
	if len(exprs) == 0 {
		return nil, fmt.Errorf("no queries")
	}
	return exprs, nil
}
