// Command cronoracle answers schedule questions with robfig/cron v3.0.1, the
// library kube-controller-manager uses, so shardcron's Rust engine can be
// compared against it (tests/schedule_differential.rs, benches/schedule.rs).
//
// Modes:
//
//	cronoracle next   reads "<unix-nanos>\t<zone>\t<count>\t<schedule>" lines and
//	                  answers "OK <unix-seconds>..." ("never" ends the list when
//	                  Next returns the zero time) or "ERR <message>". Activation
//	                  times are whole seconds, and may lie beyond 2262, where
//	                  Unix nanoseconds overflow.
//	cronoracle bench  reads "<zone>\t<schedule>" lines and prints the mean
//	                  ns/op of ParseStandard and of Next over the whole mix.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cronoracle next|bench < input")
		os.Exit(2)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	switch os.Args[1] {
	case "next":
		for in.Scan() {
			fmt.Fprintln(out, answer(in.Text()))
		}
	case "bench":
		bench(in, out)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

func answer(line string) (reply string) {
	parts := strings.SplitN(line, "\t", 4)
	if len(parts) != 4 {
		return "ERR malformed request"
	}
	nanos, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return "ERR malformed instant"
	}
	count, err := strconv.Atoi(parts[2])
	if err != nil {
		return "ERR malformed count"
	}
	loc, err := time.LoadLocation(parts[1])
	if err != nil {
		return "ERR bad zone"
	}
	// robfig panics on some inputs ("TZ=UTC" with nothing after it); report a
	// panic as a rejection, which is what shardcron must do instead.
	defer func() {
		if r := recover(); r != nil {
			reply = fmt.Sprintf("ERR panic: %v", r)
		}
	}()
	// The schedule comes last: it may itself contain tabs.
	sched, err := cron.ParseStandard(parts[3])
	if err != nil {
		return "ERR " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	t := time.Unix(0, nanos).In(loc)
	var b strings.Builder
	b.WriteString("OK")
	for i := 0; i < count; i++ {
		t = sched.Next(t)
		if t.IsZero() {
			b.WriteString(" never")
			break
		}
		b.WriteString(" ")
		b.WriteString(strconv.FormatInt(t.Unix(), 10))
	}
	return b.String()
}

func bench(in *bufio.Scanner, out *bufio.Writer) {
	type item struct {
		spec string
		loc  *time.Location
	}
	var items []item
	for in.Scan() {
		parts := strings.SplitN(in.Text(), "\t", 2)
		if len(parts) != 2 {
			continue
		}
		loc, err := time.LoadLocation(parts[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad zone", parts[0])
			os.Exit(2)
		}
		items = append(items, item{parts[1], loc})
	}
	if len(items) == 0 {
		fmt.Fprintln(os.Stderr, "no schedules")
		os.Exit(2)
	}
	scheds := make([]cron.Schedule, len(items))
	for i, it := range items {
		s, err := cron.ParseStandard(it.spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad schedule", it.spec, err)
			os.Exit(2)
		}
		scheds[i] = s
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	parse := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = cron.ParseStandard(items[i%len(items)].spec)
		}
	})
	next := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			k := i % len(items)
			// Vary the instant so results are not all the same search.
			t := start.Add(time.Duration(i%9973) * 17 * time.Minute).In(items[k].loc)
			_ = scheds[k].Next(t)
		}
	})
	fmt.Fprintf(out, "parse_ns_per_op %.1f\nnext_ns_per_op %.1f\n",
		float64(parse.T.Nanoseconds())/float64(parse.N),
		float64(next.T.Nanoseconds())/float64(next.N))
}
