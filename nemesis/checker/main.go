// Command checker judges one nemesis history (docs/nemesis.md) against the
// six invariants and reports every anomaly with the records that show it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Report is the verdict on one run; --json prints it as is.
type Report struct {
	Seed       int64          `json:"seed"`
	Flavor     string         `json:"flavor"`
	SemiSync   bool           `json:"semiSync"`
	Group      string         `json:"group"`
	DurationMs float64        `json:"durationMs,omitempty"`
	Faults     map[string]int `json:"faults"` // started faults per kind
	Writes     struct {
		OK      int `json:"ok"`
		Fail    int `json:"fail"`
		Unknown int `json:"unknown"`
		Lost    int `json:"lost"` // ok writes missing from final
		// Of those, the ones a deposed primary acknowledged between an
		// emergency decision from it and its fence (asynchronous
		// replication; with semi-sync on they are anomalies, not counted).
		LostDeposed int `json:"lostDeposed"`
		// And the ones an old primary acknowledged after the operators last
		// saw it answer, before the emergency decision from it.
		LostUnseen int `json:"lostUnseen"`
		// With semi-sync on, the ones acknowledged inside a fallback window
		// of their site (its primary side switched off by the operator);
		// they are then judged as asynchronous losses.
		LostFallback int `json:"lostFallback"`
	} `json:"writes"`
	LeaseCalls  int       `json:"leaseCalls"`
	Revocations int       `json:"revocations"`
	Decisions   int       `json:"decisions"`
	Anomalies   []Anomaly `json:"anomalies"`
}

// Check runs every invariant over a parsed history.
func Check(h *History, visualize string) (*Report, error) {
	rep := &Report{Seed: *h.Run.Seed, Flavor: h.Run.Flavor, SemiSync: *h.Run.SemiSync, Group: h.Run.Group, Faults: map[string]int{}}
	if h.Run.EndUs != nil {
		rep.DurationMs = float64(*h.Run.EndUs-h.Run.StartUs) / 1000
	}
	for _, r := range h.Records {
		switch r.Type {
		case "nemesis":
			if r.Action == "start" {
				rep.Faults[r.Fault]++
			}
		case "write":
			switch r.Result {
			case "ok":
				rep.Writes.OK++
			case "fail":
				rep.Writes.Fail++
			default:
				rep.Writes.Unknown++
			}
		case "lease":
			rep.LeaseCalls++
		case "revocation":
			rep.Revocations++
		case "decision":
			rep.Decisions++
		}
	}
	var all []Anomaly
	all = append(all, checkTwoWritable(h)...)
	all = append(all, checkGenerations(h)...)
	overlaps := checkLeaseOverlap(h)
	lin, err := checkLeaseLinearizability(h, visualize)
	if err != nil {
		return nil, err
	}
	// Two leases held at once are also calls no single lease could answer:
	// one fault, reported once, by its overlap, which names both holders.
	// Porcupine alone reports what no overlap shows (a grant after the
	// holder's own revocation, a renewal of a lease never granted).
	switch {
	case lin != nil && len(overlaps) > 0:
		overlaps[0].Cause += "; the lease calls are not linearizable either (Porcupine)"
	case lin != nil:
		all = append(all, *lin)
	}
	all = append(all, overlaps...)
	durability, losses := checkDurability(h)
	rep.Writes.Lost, rep.Writes.LostDeposed, rep.Writes.LostUnseen, rep.Writes.LostFallback = losses.lost, losses.deposed, losses.unseen, losses.fallback
	all = append(all, durability...)
	all = append(all, checkFences(h)...)
	all = append(all, checkFalseFailover(h)...)
	byLine := map[int]*Record{}
	for i := range h.Records {
		byLine[h.Records[i].Line] = &h.Records[i]
	}
	for i := range all {
		all[i].Excerpt = excerpt(h, byLine, all[i].Lines)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Invariant < all[j].Invariant })
	rep.Anomalies = all
	if rep.Anomalies == nil {
		rep.Anomalies = []Anomaly{}
	}
	return rep, nil
}

// excerpt shows the records of the given lines, time-ordered, each as its
// own JSON without the type's noise, the time relative to the run's start.
func excerpt(h *History, byLine map[int]*Record, lines []int) []ExcerptLine {
	var out []ExcerptLine
	for _, l := range lines {
		r, ok := byLine[l]
		if !ok {
			continue
		}
		text, _ := json.Marshal(r)
		t := recordTime(r)
		rel := float64(t-h.Run.StartUs) / 1000
		if r.Type == "final" {
			rel = -1
			if h.Run.EndUs != nil {
				rel = float64(*h.Run.EndUs-h.Run.StartUs) / 1000
			}
		}
		out = append(out, ExcerptLine{Line: l, TimeMs: rel, Text: string(text)})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].TimeMs != out[j].TimeMs {
			return out[i].TimeMs < out[j].TimeMs
		}
		return out[i].Line < out[j].Line
	})
	return out
}

func printTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "run          seed=%d flavor=%s semiSync=%t group=%s", rep.Seed, rep.Flavor, rep.SemiSync, rep.Group)
	if rep.DurationMs > 0 {
		fmt.Fprintf(w, " duration=%.0fms", rep.DurationMs)
	}
	fmt.Fprintln(w)
	var kinds []string
	for k := range rep.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var faults []string
	for _, k := range kinds {
		faults = append(faults, fmt.Sprintf("%s=%d", k, rep.Faults[k]))
	}
	if len(faults) == 0 {
		faults = []string{"none"}
	}
	fmt.Fprintf(w, "faults       %s\n", strings.Join(faults, " "))
	fmt.Fprintf(w, "writes       ok=%d fail=%d unknown=%d lost=%d (deposed primary before its fence: %d; after the operators last saw it: %d; in a semi-sync fallback window: %d)\n", rep.Writes.OK, rep.Writes.Fail, rep.Writes.Unknown, rep.Writes.Lost, rep.Writes.LostDeposed, rep.Writes.LostUnseen, rep.Writes.LostFallback)
	fmt.Fprintf(w, "lease calls  %d (revocations %d)\n", rep.LeaseCalls, rep.Revocations)
	fmt.Fprintf(w, "decisions    %d\n", rep.Decisions)
	fmt.Fprintf(w, "anomalies    %d\n", len(rep.Anomalies))
	for _, a := range rep.Anomalies {
		fmt.Fprintf(w, "\n[invariant %d] %s\n", a.Invariant, a.Cause)
		for _, e := range a.Excerpt {
			fmt.Fprintf(w, "  %10.1fms  line %-5d %s\n", e.TimeMs, e.Line, e.Text)
		}
	}
}

// run is the whole command; it returns the exit code: 0 no anomaly, 1 an
// anomaly, 2 unreadable or malformed input.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("checker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	visualize := fs.String("visualize", "", "write Porcupine's visualization of the lease calls to this HTML file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: checker [--json] [--visualize FILE] history.jsonl")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "checker: %v\n", err)
		return 2
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			fmt.Fprintf(stderr, "checker: %s: malformed history: %v\n", path, err)
		} else {
			fmt.Fprintf(stderr, "checker: %s: %v\n", path, err)
		}
		return 2
	}
	rep, err := Check(h, *visualize)
	if err != nil {
		fmt.Fprintf(stderr, "checker: %v\n", err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printTable(stdout, rep)
	}
	if len(rep.Anomalies) > 0 {
		return 1
	}
	return 0
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
