// Command opa-bench-driver evaluates one Rego policy in process with OPA's Go API, the way
// OPA's own server does (rego.New(...).PrepareForEval once, then PreparedEvalQuery.Eval
// with the input as a parsed ast.Value and the server's inter-query builtin value cache,
// which holds compiled regexes), for the agenthooks vs OPA bench
// (e2e/benches/opa.rs, bench/README.md).
//
//	opa-bench-driver --policy policy.rego --inputs inputs.jsonl [--query data.agenthooks.deny]
//
// Every line of --inputs is one input document (JSON). The driver prepares the query,
// converts every input to an ast.Value, prints {"ready":true,...} and then answers one JSON
// line per command read from stdin:
//
//	decide                    {"decisions":[[ids...],...]}: the sorted ids the query returns
//	                          for every input, in file order (they become the expected
//	                          decisions of the time command)
//	time GROUP MILLIS I,J,... evaluates inputs I, J, ... in turn for MILLIS ms, timing each
//	                          Eval alone; every result is checked against the input's
//	                          decision (an error line on a mismatch); the latencies are
//	                          added to GROUP. {"n":count}
//	stats GROUP               {"n","p50_ns","p99_ns","mean_ns"} of everything timed in GROUP
//	quit                      exits
//
// Errors are answered {"error":"..."}, and the bench fails on them.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown/cache"
	"github.com/open-policy-agent/opa/v1/util"
)

type driver struct {
	ctx      context.Context
	pq       rego.PreparedEvalQuery
	vcache   cache.InterQueryValueCache
	inputs   []ast.Value
	expected [][]string
	groups   map[string][]int64
}

func main() {
	policy := flag.String("policy", "", "the Rego module")
	inputs := flag.String("inputs", "", "JSON lines, one input document each")
	query := flag.String("query", "data.agenthooks.deny", "the query, a set of ids")
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	if err := run(*policy, *inputs, *query, out); err != nil {
		_ = out.Encode(map[string]string{"error": err.Error()})
		os.Exit(1)
	}
}

func run(policy, inputs, query string, out *json.Encoder) error {
	ctx := context.Background()
	src, err := os.ReadFile(policy)
	if err != nil {
		return err
	}
	started := time.Now()
	pq, err := rego.New(rego.Query(query), rego.Module(policy, string(src))).PrepareForEval(ctx)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	prepare := time.Since(started)
	// What OPA's server builds at start (server.Init) when no caching config is given.
	config, err := cache.ParseCachingConfig(nil)
	if err != nil {
		return err
	}
	d := &driver{
		ctx:    ctx,
		pq:     pq,
		vcache: cache.NewInterQueryValueCache(ctx, config),
		groups: map[string][]int64{},
	}
	if err := d.load(inputs); err != nil {
		return err
	}
	if err := out.Encode(map[string]any{"ready": true, "prepare_ns": prepare.Nanoseconds(), "inputs": len(d.inputs)}); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "quit" {
			return nil
		}
		reply, err := d.command(fields)
		if err != nil {
			reply = map[string]any{"error": err.Error()}
		}
		if err := out.Encode(reply); err != nil {
			return err
		}
	}
	return in.Err()
}

// load reads the input documents and converts each to an ast.Value, as the server does
// with a request's "input" (util.NewJSONDecoder, then ast.InterfaceToValue).
func (d *driver) load(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var doc any
		if err := util.UnmarshalJSON(sc.Bytes(), &doc); err != nil {
			return fmt.Errorf("input %d: %w", len(d.inputs), err)
		}
		v, err := ast.InterfaceToValue(doc)
		if err != nil {
			return fmt.Errorf("input %d: %w", len(d.inputs), err)
		}
		d.inputs = append(d.inputs, v)
	}
	return sc.Err()
}

func (d *driver) eval(i int) (rego.ResultSet, error) {
	return d.pq.Eval(d.ctx,
		rego.EvalParsedInput(d.inputs[i]),
		rego.EvalInterQueryBuiltinValueCache(d.vcache))
}

// ids are the sorted strings of the query's one result (a set, as JSON an array).
func ids(rs rego.ResultSet) ([]string, error) {
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return nil, fmt.Errorf("expected one result, got %v", rs)
	}
	values, ok := rs[0].Expressions[0].Value.([]any)
	if !ok {
		return nil, fmt.Errorf("expected a set of ids, got %T", rs[0].Expressions[0].Value)
	}
	out := make([]string, 0, len(values))
	for _, v := range values {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("expected string ids, got %T", v)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}

func (d *driver) command(fields []string) (any, error) {
	switch fields[0] {
	case "decide":
		d.expected = make([][]string, len(d.inputs))
		for i := range d.inputs {
			rs, err := d.eval(i)
			if err != nil {
				return nil, fmt.Errorf("input %d: %w", i, err)
			}
			if d.expected[i], err = ids(rs); err != nil {
				return nil, fmt.Errorf("input %d: %w", i, err)
			}
		}
		return map[string]any{"decisions": d.expected}, nil
	case "time":
		if len(fields) != 4 {
			return nil, fmt.Errorf("usage: time GROUP MILLIS I,J,...")
		}
		if d.expected == nil {
			return nil, fmt.Errorf("time before decide")
		}
		millis, err := strconv.Atoi(fields[2])
		if err != nil {
			return nil, err
		}
		var which []int
		for _, s := range strings.Split(fields[3], ",") {
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(d.inputs) {
				return nil, fmt.Errorf("bad input index %q", s)
			}
			which = append(which, i)
		}
		lat := d.groups[fields[1]]
		n := 0
		deadline := time.Now().Add(time.Duration(millis) * time.Millisecond)
		for time.Now().Before(deadline) {
			i := which[n%len(which)]
			t := time.Now()
			rs, err := d.eval(i)
			took := time.Since(t)
			if err != nil {
				return nil, fmt.Errorf("input %d: %w", i, err)
			}
			got, err := ids(rs)
			if err != nil {
				return nil, fmt.Errorf("input %d: %w", i, err)
			}
			if !slices.Equal(got, d.expected[i]) {
				return nil, fmt.Errorf("input %d: timed decision %v differs from %v", i, got, d.expected[i])
			}
			lat = append(lat, took.Nanoseconds())
			n++
		}
		d.groups[fields[1]] = lat
		return map[string]any{"n": n}, nil
	case "stats":
		if len(fields) != 2 {
			return nil, fmt.Errorf("usage: stats GROUP")
		}
		lat := slices.Clone(d.groups[fields[1]])
		if len(lat) == 0 {
			return nil, fmt.Errorf("group %q has no samples", fields[1])
		}
		slices.Sort(lat)
		var sum int64
		for _, v := range lat {
			sum += v
		}
		pct := func(p float64) int64 {
			i := int(float64(len(lat))*p+0.999999) - 1
			return lat[max(0, min(i, len(lat)-1))]
		}
		return map[string]any{
			"n":       len(lat),
			"p50_ns":  pct(0.50),
			"p99_ns":  pct(0.99),
			"mean_ns": float64(sum) / float64(len(lat)),
		}, nil
	}
	return nil, fmt.Errorf("unknown command %q", fields[0])
}
