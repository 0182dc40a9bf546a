package main

import (
	"fmt"
	"sort"
)

// Anomaly is one violation of an invariant of docs/nemesis.md.
type Anomaly struct {
	Invariant int           `json:"invariant"`
	Cause     string        `json:"cause"`
	Lines     []int         `json:"lines"` // the history lines that show it
	Excerpt   []ExcerptLine `json:"excerpt"`
}

// ExcerptLine is one record of an anomaly's excerpt, its time relative to
// the run's start.
type ExcerptLine struct {
	Line   int     `json:"line"`
	TimeMs float64 `json:"timeMs"`
	Text   string  `json:"text"`
}

func ms(us int64) string { return fmt.Sprintf("%.1fms", float64(us)/1000) }

// step is a piece of a timeline: a value holding from `at` on.
type step struct {
	at   int64
	val  bool
	line int
}

// valueAt is the last step at or before t (ok=false when none yet).
func valueAt(steps []step, t int64) (step, bool) {
	i := sort.Search(len(steps), func(i int) bool { return steps[i].at > t })
	if i == 0 {
		return step{}, false
	}
	return steps[i-1], true
}

// Invariant 1: never two writable sites under the operator's decisions.
func checkTwoWritable(h *History) []Anomaly {
	sites := h.Run.Sites
	writable := map[string][]step{}
	var times []int64
	// A site is certainly writable between two consecutive polls that both
	// saw it writable; between a writable poll and a read-only one it
	// changed at some unknown instant, so that stretch counts as not
	// writable (a fence and a promotion a few milliseconds apart, polled
	// in the other order, are no window).
	polls := map[string][]*Record{}
	for _, p := range h.ofType("poll") {
		polls[p.Site] = append(polls[p.Site], p)
		times = append(times, p.At)
	}
	for site, ps := range polls {
		for k, p := range ps {
			w := *p.Writable && *p.OK
			if k+1 < len(ps) {
				w = w && *ps[k+1].Writable && *ps[k+1].OK
			}
			writable[site] = append(writable[site], step{p.At, w, p.Line})
		}
	}
	// Reachability of each site from each operator, by the probes' answers.
	reach := map[string]map[string][]step{}
	operators := map[string]bool{}
	for _, p := range h.ofType("probe") {
		if reach[p.Site] == nil {
			reach[p.Site] = map[string][]step{}
		}
		reach[p.Site][p.From] = append(reach[p.Site][p.From], step{p.RetUs, *p.OK, p.Line})
		operators[p.From] = true
		times = append(times, p.RetUs)
	}
	for _, s := range reach {
		for _, steps := range s {
			sort.SliceStable(steps, func(i, j int) bool { return steps[i].at < steps[j].at })
		}
	}
	statuses := h.ofType("status")
	for _, s := range statuses {
		times = append(times, s.At)
	}
	activeAt := func(t int64) (*Record, bool) {
		var last *Record
		for _, s := range statuses {
			if s.At > t {
				break
			}
			last = s
		}
		return last, last != nil
	}
	// reachableSince: when the site became reachable again from some
	// operator (the latest ok after a failed probe, or the first probe),
	// or -1 when no operator reaches it at t.
	reachableSince := func(site string, t int64) (int64, []int) {
		since := int64(-1)
		var lines []int
		for op := range operators {
			steps := reach[site][op]
			last, ok := valueAt(steps, t)
			if !ok {
				// Never probed by this operator yet: no evidence that it is
				// cut off, so it counts as reachable all along.
				return 0, nil
			}
			lines = append(lines, last.line)
			if !last.val {
				continue
			}
			// Walk back to the start of this run of ok answers.
			j := sort.Search(len(steps), func(i int) bool { return steps[i].at > t }) - 1
			for j > 0 && steps[j-1].val {
				j--
			}
			start := steps[j].at
			if j == 0 {
				start = 0 // reachable since the run began
			}
			if since < 0 || start < since {
				since = start
			}
		}
		return since, lines
	}
	if len(operators) == 0 {
		operators["(none)"] = true
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	end := int64(1 << 62)
	if h.Run.EndUs != nil {
		end = *h.Run.EndUs
	}
	var out []Anomaly
	// Walk the segments between events; a window is a maximal run of
	// segments with both sites writable.
	var win *Anomaly
	var winStart int64
	unexplained := false
	flush := func(t int64) {
		if win != nil && unexplained {
			// The faults active in the window belong in its excerpt.
			stops := map[string]int64{}
			for _, n := range h.ofType("nemesis") {
				if n.Action == "stop" {
					stops[n.ID] = n.At
				}
			}
			for _, n := range h.ofType("nemesis") {
				stop, stopped := stops[n.ID]
				running := n.Action == "start" && (!stopped || stop >= winStart)
				if n.At <= t && (running || n.At >= winStart) {
					win.Lines = appendLine(win.Lines, n.Line)
				}
			}
			win.Cause = fmt.Sprintf("both sites writable from %s to %s and the site not named active was reachable by an operator for more than fenceBoundMs", ms(winStart-h.Run.StartUs), ms(t-h.Run.StartUs))
			out = append(out, *win)
		}
		win, unexplained = nil, false
	}
	for k, t := range times {
		segEnd := end
		if k+1 < len(times) {
			segEnd = times[k+1]
		}
		if segEnd == t {
			continue
		}
		w0, ok0 := valueAt(writable[sites[0]], t)
		w1, ok1 := valueAt(writable[sites[1]], t)
		both := ok0 && ok1 && w0.val && w1.val
		if !both {
			flush(t)
			continue
		}
		if win == nil {
			win, winStart = &Anomaly{Invariant: 1}, t
		}
		win.Lines = appendLine(win.Lines, w0.line, w1.line)
		st, known := activeAt(t)
		if !known {
			unexplained = true
			continue
		}
		win.Lines = appendLine(win.Lines, st.Line)
		other := sites[0]
		if st.ActiveSite == sites[0] {
			other = sites[1]
		}
		since, lines := reachableSince(other, t)
		// Explained while no operator reaches the other site, or it came
		// back less than fenceBoundMs ago (it is fenced on first sight).
		if since >= 0 && segEnd-since > h.Run.FenceBoundMs*1000 {
			unexplained = true
			win.Lines = appendLine(win.Lines, lines...)
		}
	}
	flush(end)
	return out
}

func appendLine(lines []int, more ...int) []int {
	for _, m := range more {
		found := false
		for _, l := range lines {
			if l == m {
				found = true
				break
			}
		}
		if !found && m > 0 {
			lines = append(lines, m)
		}
	}
	return lines
}

// Invariant 2: topologyGeneration moves +1 per decision.
func checkGenerations(h *History) []Anomaly {
	var out []Anomaly
	statuses := h.ofType("status")
	decisions := map[int64][]*Record{}
	for _, d := range h.ofType("decision") {
		decisions[*d.Generation] = append(decisions[*d.Generation], d)
	}
	var prev *Record
	seen := map[int64]bool{}
	for _, s := range statuses {
		g := *s.Generation
		if prev != nil {
			pg := *prev.Generation
			switch {
			case g < pg:
				out = append(out, Anomaly{Invariant: 2, Cause: fmt.Sprintf("generation went down from %d to %d", pg, g), Lines: []int{prev.Line, s.Line}})
			case g > pg+1:
				out = append(out, Anomaly{Invariant: 2, Cause: fmt.Sprintf("generation skipped from %d to %d", pg, g), Lines: []int{prev.Line, s.Line}})
			case g == pg && s.ActiveSite != prev.ActiveSite:
				out = append(out, Anomaly{Invariant: 2, Cause: fmt.Sprintf("activeSite changed from %s to %s without a new generation (%d)", prev.ActiveSite, s.ActiveSite, g), Lines: []int{prev.Line, s.Line}})
			}
			if g > pg && !seen[g] {
				seen[g] = true
				ds := decisions[g]
				if len(ds) != 1 {
					a := Anomaly{Invariant: 2, Cause: fmt.Sprintf("generation %d has %d decisions, not exactly one", g, len(ds)), Lines: []int{s.Line}}
					for _, d := range ds {
						a.Lines = append(a.Lines, d.Line)
					}
					out = append(out, a)
				}
			}
		}
		seen[g] = true
		if prev == nil || g >= *prev.Generation {
			prev = s
		}
	}
	return out
}

// Invariant 3 (intervals): no two confirmed migration leases overlap. Each
// granting answer confirms its operation from its retUs to its
// confirmedUntilUs; a revoked operation's hold ends at its fence's stoppedUs
// when that comes first (the fence is what ends it early), and a released
// one's at its release. Every pair of
// operations is reported once, at their first overlap.
func checkLeaseOverlap(h *History) []Anomaly {
	type interval struct {
		op       string
		from, to int64
		lines    []int
	}
	stopped := map[string]*Record{}
	for _, f := range h.ofType("fence") {
		if s, ok := stopped[f.OperationID]; !ok || f.StoppedUs < s.StoppedUs {
			stopped[f.OperationID] = f
		}
	}
	// A successful release ends the operation's hold when it was called:
	// the client stops using the lease before it gives it back.
	released := map[string]*Record{}
	for _, r := range h.ofType("lease") {
		if r.Kind == "migration" && r.Call == "release" && r.Status != nil && *r.Status == 204 {
			if _, ok := released[r.OperationID]; !ok {
				released[r.OperationID] = r
			}
		}
	}
	var ivs []interval
	for _, r := range h.ofType("lease") {
		if r.Kind != "migration" || r.Status == nil || r.ConfirmedUntilUs == nil {
			continue
		}
		if *r.Status != 200 && *r.Status != 201 {
			continue
		}
		iv := interval{op: r.OperationID, from: r.RetUs, to: *r.ConfirmedUntilUs, lines: []int{r.Line}}
		if f, ok := stopped[r.OperationID]; ok && f.StoppedUs < iv.to && f.StoppedUs >= iv.from {
			iv.to = f.StoppedUs
			iv.lines = append(iv.lines, f.Line)
		}
		if rel, ok := released[r.OperationID]; ok && rel.CallUs < iv.to && rel.CallUs >= iv.from {
			iv.to = rel.CallUs
			iv.lines = append(iv.lines, rel.Line)
		}
		ivs = append(ivs, iv)
	}
	sort.SliceStable(ivs, func(i, j int) bool { return ivs[i].from < ivs[j].from })
	reported := map[[2]string]bool{}
	var out []Anomaly
	for i := range ivs {
		for j := i + 1; j < len(ivs); j++ {
			a, b := ivs[i], ivs[j]
			if a.op == b.op || b.from >= a.to || reported[[2]string{a.op, b.op}] {
				continue
			}
			reported[[2]string{a.op, b.op}] = true
			reported[[2]string{b.op, a.op}] = true
			out = append(out, Anomaly{Invariant: 3, Cause: fmt.Sprintf("confirmed migration leases overlap: %s until %s, %s from %s", a.op, ms(a.to-h.Run.StartUs), b.op, ms(b.from-h.Run.StartUs)), Lines: appendLine(append([]int{}, a.lines...), b.lines...)})
		}
	}
	return out
}

// Invariant 4: durability of the acknowledged writes.
//
// Returns the anomalies and the counts of the ok writes missing from final
// (losses).
func checkDurability(h *History) ([]Anomaly, losses) {
	present := map[int64]bool{}
	finals := h.ofType("final")
	for _, f := range finals {
		for _, v := range f.Values {
			present[v] = true
		}
	}
	decisions := h.ofType("decision")
	var emergencies []*Record
	for _, d := range decisions {
		if d.Kind == "emergency" {
			emergencies = append(emergencies, d)
		}
	}
	var out []Anomaly
	var n losses
	used := map[*Record]int{}
	usedLines := map[*Record][]int{}
	semiSync := *h.Run.SemiSync
	var windows map[string][]fallbackWindow
	if semiSync {
		windows = fallbackWindows(h)
	}
	for _, w := range h.ofType("write") {
		if w.Result != "ok" || present[w.Value] {
			continue
		}
		n.lost++
		// A deposed primary answering again after a pause or a cut: with
		// asynchronous replication its writes until the fence are that
		// window's. With semi-sync on the server never falls back by
		// itself and the operator falls back only on the decided primary,
		// so a deposed primary's commits wait for an acknowledgement until
		// its fence ends their sessions: none of them is acknowledged.
		if d, fence := deposedBeforeFence(h, emergencies, w); d != nil {
			// Unless the operator had fallen back on it before it was
			// deposed: its primary side stayed off, and its writes until
			// the fence are the asynchronous window's.
			if semiSync && !openAt(windows[w.Site], d.At) {
				out = append(out, Anomaly{Invariant: 4, Cause: fmt.Sprintf("ok write %d (site %s) is missing from final: acknowledged by the deposed primary %s before its fence, with semi-sync on", w.Value, w.Site, w.Site), Lines: finalLines(finals, w.Line, d.Line, fence.Line)})
				continue
			}
			n.deposed++
			continue
		}
		lines := []int{w.Line}
		where := ""
		if semiSync {
			// Semi-sync on: a loss is allowed only inside a fallback
			// window of its site, and is then an asynchronous one.
			win, ok := inFallbackWindow(windows[w.Site], decisions, w)
			if !ok {
				out = append(out, Anomaly{Invariant: 4, Cause: fmt.Sprintf("ok write %d (site %s) is missing from final with semi-sync on", w.Value, w.Site), Lines: finalLines(finals, w.Line)})
				continue
			}
			n.fallback++
			lines = append(lines, win.lines...)
			until := "on"
			if win.to < 1<<62 {
				until = "to " + ms(win.to-h.Run.StartUs)
			}
			where = fmt.Sprintf(" (acknowledged in the semi-sync fallback window of %s from %s %s)", w.Site, ms(win.from-h.Run.StartUs), until)
		}
		// Async: a loss is allowed when the site that took the write was
		// the `from` of an emergency decision after it, counted against
		// that decision's `abandoned`.
		var d *Record
		for _, e := range emergencies {
			if e.From == w.Site && e.At >= w.RetUs {
				d = e
				break
			}
		}
		if d == nil {
			out = append(out, Anomaly{Invariant: 4, Cause: fmt.Sprintf("ok write %d (site %s) is missing from final and no emergency decision from that site abandoned it%s", w.Value, w.Site, where), Lines: finalLines(finals, lines...)})
			continue
		}
		// Acknowledged after every operator last saw the site answer: the
		// decision could not know of it (it counts what the site was last
		// seen with), so it is the async window's, counted.
		if w.RetUs > lastSeen(h, w.Site, d.At) {
			n.unseen++
			continue
		}
		used[d]++
		usedLines[d] = append(usedLines[d], lines...)
	}
	for _, d := range emergencies {
		if int64(used[d]) > d.Abandoned {
			lines := append(usedLines[d], d.Line)
			out = append(out, Anomaly{Invariant: 4, Cause: fmt.Sprintf("%d ok writes to %s lost at the emergency decision of generation %d, which reports abandoned=%d", used[d], d.From, *d.Generation, d.Abandoned), Lines: finalLines(finals, lines...)})
		}
	}
	return out, n
}

// losses counts the ok writes missing from final: all of them (lost), and
// of those, the ones of a deposed primary before its fence (deposed, async
// only), the ones acknowledged after the operators last saw their site
// (unseen), and, with semi-sync on, the ones acknowledged inside a
// fallback window of their site (fallback).
type losses struct {
	lost, deposed, unseen, fallback int
}

// fallbackWindow is a stretch [from, to] in which a site's primary side of
// semi-sync may have been off (the operator's fallback to asynchronous
// replication), with the lines of the polls that bound it.
type fallbackWindow struct {
	from, to int64
	lines    []int
}

// fallbackWindows returns, per site, its fallback windows by its polls. A
// window opens at the last ok poll that saw the primary side switched on
// before one that saw it off (the run's start if none: it went off at an
// unknown instant after the former), and closes at the first later poll
// that saw it switched on with commits waiting for acknowledgements (the
// run's end, or never, if none). Switched on while the status is off (a
// replica catching up after it reconnected), commits are acknowledged
// without waiting too, so such a poll closes nothing. Polls without the
// fields (the server did not have them, or an older history) open and
// close nothing.
func fallbackWindows(h *History) map[string][]fallbackWindow {
	end := int64(1 << 62)
	if h.Run.EndUs != nil {
		end = *h.Run.EndUs
	}
	out := map[string][]fallbackWindow{}
	lastOn := map[string]*Record{}
	open := map[string]*fallbackWindow{}
	for _, p := range h.ofType("poll") {
		if p.SemiSyncEnabled == nil || !*p.OK {
			continue
		}
		enabled := *p.SemiSyncEnabled
		active := p.SemiSyncActive != nil && *p.SemiSyncActive
		if w := open[p.Site]; w != nil {
			if enabled && active {
				w.to = p.At
				w.lines = append(w.lines, p.Line)
				out[p.Site] = append(out[p.Site], *w)
				delete(open, p.Site)
			}
		} else if !enabled {
			w := &fallbackWindow{from: h.Run.StartUs, to: end}
			if on := lastOn[p.Site]; on != nil {
				w.from = on.At
				w.lines = append(w.lines, on.Line)
			}
			w.lines = append(w.lines, p.Line)
			open[p.Site] = w
		}
		if enabled {
			lastOn[p.Site] = p
		}
	}
	for site, w := range open {
		out[site] = append(out[site], *w)
	}
	return out
}

// openAt: whether one of the windows was open at t.
func openAt(windows []fallbackWindow, t int64) bool {
	for _, win := range windows {
		if win.from <= t && t <= win.to {
			return true
		}
	}
	return false
}

// inFallbackWindow: the window of its site the write returned in, if any.
// A write that returned while its site was deposed (after an emergency
// decision from it, before any later decision naming it active again) is
// in none: the operator falls back only on the decided primary, and a
// deposed primary's switch is turned off only by its fence, once its
// client sessions are ended.
func inFallbackWindow(windows []fallbackWindow, decisions []*Record, w *Record) (fallbackWindow, bool) {
	deposed := false
	for _, d := range decisions {
		if d.At > w.RetUs {
			break
		}
		switch {
		case d.Kind == "emergency" && d.From == w.Site:
			deposed = true
		case d.ActiveSite == w.Site:
			deposed = false
		}
	}
	if deposed {
		return fallbackWindow{}, false
	}
	for _, win := range windows {
		if win.from <= w.RetUs && w.RetUs <= win.to {
			return win, true
		}
	}
	return fallbackWindow{}, false
}

// lastSeen is the latest ok probe answer of `site` at or before `t`, by any
// operator (0 when none).
func lastSeen(h *History, site string, t int64) int64 {
	var last int64
	for _, p := range h.ofType("probe") {
		if p.Site == site && *p.OK && p.RetUs <= t && p.RetUs > last {
			last = p.RetUs
		}
	}
	return last
}

// deposedBeforeFence: the deposed primary's window. An emergency decision
// from the write's site came before the write returned (the old primary
// was paused or cut off, and answered again), and the write returned
// before any poll after that decision saw the site fenced (read-only).
// Returns that decision and that poll, or nils. The fence itself is
// bounded by invariant 1 (fenceBoundMs from the site being reachable
// again); a site never seen fenced after the decision gives no window.
func deposedBeforeFence(h *History, emergencies []*Record, w *Record) (*Record, *Record) {
	for _, e := range emergencies {
		if e.From != w.Site || e.At > w.RetUs {
			continue
		}
		for _, p := range h.ofType("poll") {
			if p.Site == w.Site && p.At >= e.At && *p.OK && !*p.Writable {
				if w.RetUs <= p.At {
					return e, p
				}
				return nil, nil
			}
		}
	}
	return nil, nil
}

func finalLines(finals []*Record, lines ...int) []int {
	out := append([]int{}, lines...)
	for _, f := range finals {
		out = appendLine(out, f.Line)
	}
	return out
}

// Invariant 5: a revoked operation is fenced before its last confirmed
// deadline.
func checkFences(h *History) []Anomaly {
	lastUntil := map[string]*Record{}
	for _, r := range h.ofType("lease") {
		if r.ConfirmedUntilUs == nil {
			continue
		}
		if l, ok := lastUntil[r.OperationID]; !ok || *r.ConfirmedUntilUs > *l.ConfirmedUntilUs {
			lastUntil[r.OperationID] = r
		}
	}
	fences := map[string][]*Record{}
	for _, f := range h.ofType("fence") {
		fences[f.OperationID] = append(fences[f.OperationID], f)
	}
	var out []Anomaly
	for _, rv := range h.ofType("revocation") {
		last, ok := lastUntil[rv.OperationID]
		if !ok {
			continue // never confirmed: it held nothing to fence
		}
		deadline := *last.ConfirmedUntilUs
		fs := fences[rv.OperationID]
		if len(fs) == 0 {
			out = append(out, Anomaly{Invariant: 5, Cause: fmt.Sprintf("operation %s was revoked and never fenced (confirmed until %s)", rv.OperationID, ms(deadline-h.Run.StartUs)), Lines: []int{last.Line, rv.Line}})
			continue
		}
		inTime := false
		for _, f := range fs {
			if f.StoppedUs <= deadline {
				inTime = true
			}
		}
		if !inTime {
			f := fs[0]
			out = append(out, Anomaly{Invariant: 5, Cause: fmt.Sprintf("operation %s stopped at %s, after its confirmed deadline %s", rv.OperationID, ms(f.StoppedUs-h.Run.StartUs), ms(deadline-h.Run.StartUs)), Lines: []int{last.Line, rv.Line, f.Line}})
		}
	}
	return out
}

// Invariant 6: no emergency failover while every operator still saw the old
// primary answer in time.
func checkFalseFailover(h *History) []Anomaly {
	budgetUs := (h.Run.FailureThreshold*h.Run.ProbeIntervalMs + h.Run.ProbeTimeoutMs) * 1000
	probes := h.ofType("probe")
	operators := map[string]bool{}
	for _, p := range probes {
		operators[p.From] = true
	}
	var out []Anomaly
	for _, d := range h.ofType("decision") {
		if d.Kind != "emergency" || d.From == "" {
			continue
		}
		from := d.At - budgetUs
		healthy := map[string]bool{}
		seen := map[string]bool{}
		var lines []int
		for _, p := range probes {
			if p.Site != d.From || p.CallUs < from || p.CallUs > d.At {
				continue
			}
			if !seen[p.From] {
				healthy[p.From] = true
			}
			seen[p.From] = true
			if !*p.OK || p.RetUs-p.CallUs > h.Run.ProbeTimeoutMs*1000 {
				healthy[p.From] = false
			}
			lines = append(lines, p.Line)
		}
		allHealthy := len(operators) > 0
		for op := range operators {
			if !healthy[op] {
				allHealthy = false
			}
		}
		if allHealthy {
			if len(lines) > 5 {
				lines = lines[len(lines)-5:]
			}
			out = append(out, Anomaly{Invariant: 6, Cause: fmt.Sprintf("emergency failover from %s (generation %d) while every operator's probes of it answered within probeTimeoutMs through the detection budget", d.From, *d.Generation), Lines: append(lines, d.Line)})
		}
	}
	return out
}
