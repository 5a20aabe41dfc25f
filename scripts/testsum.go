//go:build ignore

// testsum reads `go test -json` on stdin and writes what `go test` writes
// without -v (each package's result, and the output of failed tests),
// then one line counting the skipped tests, each package named by its
// path below the module of the current directory's go.mod (metrics and
// examples/metrics are two). Lines that are not test events (a build
// error) pass through. make test runs it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	held := map[string][]string{} // a running test's output, until it ends
	skipped := map[string]int{}   // per package
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	for in.Scan() {
		line := in.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			fmt.Fprintln(out, line)
			continue
		}
		id := e.Package + " " + e.Test
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
				fmt.Fprint(out, e.Output)
			}
		case e.Action == "output":
			if !strings.HasPrefix(e.Output, "=== ") {
				held[id] = append(held[id], e.Output)
			}
		case e.Action == "fail" && e.Test != "":
			for _, s := range held[id] {
				fmt.Fprint(out, s)
			}
			delete(held, id)
		case e.Action == "pass" || e.Action == "skip":
			if e.Action == "skip" && e.Test != "" {
				skipped[e.Package]++
			}
			delete(held, id)
		}
		out.Flush()
	}
	n, pkgs, mod := 0, []string{}, modulePath()
	for p, k := range skipped {
		n += k
		name := strings.TrimPrefix(p, mod+"/")
		if p == mod {
			name = p[strings.LastIndex(p, "/")+1:]
		}
		pkgs = append(pkgs, fmt.Sprintf("%s %d", name, k))
	}
	sort.Strings(pkgs)
	if n == 0 {
		fmt.Fprintln(out, "make test: no test skipped")
		return
	}
	fmt.Fprintf(out, "make test: %d tests skipped (%s); go test -v -run NAME says why\n", n, strings.Join(pkgs, ", "))
}

// modulePath returns the module path of ./go.mod, or "" when there is none
// (every package is then named by its whole path).
func modulePath() string {
	b, _ := os.ReadFile("go.mod")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}
