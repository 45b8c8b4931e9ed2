// Command checkhistory checks a history a fault-suite run saved (history.json, kept with
// EXECPLANE_CHAOS_KEEP) against the models again, and prints each verdict and how long it
// took: for a look at a failed or undecided run, or at the checker itself, without the
// cluster. Usage: go run ./internal/dev/checkhistory [-bound 3s] [-html dir] history.json
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/execplane/execplane/internal/dev/history"
)

func main() {
	// The default is test/chaos's: the gateways' view freshness bound and a second of watch.
	bound := flag.Duration("bound", 3*time.Second, "how long after a claim ended another gateway may still admit it")
	html := flag.String("html", "", "a directory for porcupine's view of a history that is not Ok")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: checkhistory [-bound d] [-html dir] history.json")
		os.Exit(2)
	}
	ops, err := history.Load(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start := time.Now()
	failed := false
	for _, v := range history.Check(ops, *bound, *html) {
		fmt.Printf("%s: %s (%d operations)\n", v.Model, v.Result, v.Operations)
		if v.Violation != "" {
			fmt.Println(v.Violation)
		}
		if v.Visualization != "" {
			fmt.Println("view:", v.Visualization)
		}
		failed = failed || v.Result != porcupine.Ok
	}
	fmt.Printf("checked %d operations in %s\n", len(ops), time.Since(start).Round(time.Millisecond))
	if failed {
		os.Exit(1)
	}
}
