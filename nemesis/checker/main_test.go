package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkFile runs the command on a history and returns its exit code, the
// parsed --json report (nil unless the code is 0 or 1) and stderr.
func checkFile(t *testing.T, path string, extra ...string) (int, *Report, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append(append([]string{"--json"}, extra...), path), &stdout, &stderr)
	if code == 2 {
		return code, nil, stderr.String()
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%s: --json output is not one JSON object: %v\n%s", path, err, stdout.String())
	}
	return code, &rep, stderr.String()
}

func invariantsOf(rep *Report) map[int]int {
	seen := map[int]int{}
	for _, a := range rep.Anomalies {
		seen[a.Invariant]++
	}
	return seen
}

// Each history with a planted violation is caught under the right invariant
// and under no other; each anomaly names a cause and shows its records.
func TestPlantedViolations(t *testing.T) {
	cases := []struct {
		file      string
		invariant int
		// One fault planted: reported once, whichever checks see it.
		once bool
	}{
		{"inv1_both_writable.jsonl", 1, false},
		{"inv1_fenced_too_late.jsonl", 1, false},
		{"inv2_generation.jsonl", 2, false},
		{"inv2_two_decisions.jsonl", 2, false},
		{"inv3_overlapping_grants.jsonl", 3, true},
		{"inv3_grant_after_own_revocation.jsonl", 3, true},
		{"inv3_renew_without_grant.jsonl", 3, false},
		{"inv4_semisync_lost.jsonl", 4, false},
		{"inv4_async_over_abandoned.jsonl", 4, false},
		{"inv4_async_deposed_after_fence.jsonl", 4, false},
		{"inv4_semisync_deposed_before_fence.jsonl", 4, true},
		{"inv4_semisync_fallback_not_abandoned.jsonl", 4, true},
		{"inv4_semisync_outside_fallback_window.jsonl", 4, false},
		{"inv4_semisync_fallback_deposed.jsonl", 4, true},
		{"inv5_late_fence.jsonl", 5, false},
		{"inv5_never_fenced.jsonl", 5, false},
		{"inv6_false_failover.jsonl", 6, false},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			code, rep, stderr := checkFile(t, filepath.Join("testdata", c.file))
			if code != 1 {
				t.Fatalf("exit %d, want 1 (stderr %q)", code, stderr)
			}
			seen := invariantsOf(rep)
			if seen[c.invariant] == 0 || len(seen) != 1 {
				t.Fatalf("anomalies by invariant %v, want only invariant %d", seen, c.invariant)
			}
			if c.once && seen[c.invariant] != 1 {
				t.Fatalf("%d anomalies for one planted fault: %+v", seen[c.invariant], rep.Anomalies)
			}
			for _, a := range rep.Anomalies {
				if a.Cause == "" || len(a.Excerpt) == 0 {
					t.Errorf("anomaly without a cause or an excerpt: %+v", a)
				}
				for i := 1; i < len(a.Excerpt); i++ {
					if a.Excerpt[i].TimeMs < a.Excerpt[i-1].TimeMs {
						t.Errorf("excerpt not time-ordered: %+v", a.Excerpt)
					}
				}
			}
		})
	}
}

// Histories that come close to a violation and must pass: the correct run,
// a both-writable window explained by a partition, a fence and a promotion
// that the polls saw in the other order, an async loss within
// what the emergency decision reports abandoned, one acknowledged after the
// operators last saw the old primary answer, a write a deposed primary
// acknowledged before its fence (async), a semi-sync loss inside a
// fallback window within what the emergency decision reports abandoned,
// and grants after a revocation or after expiry.
func TestCorrectHistoriesPass(t *testing.T) {
	for _, file := range []string{
		"valid.jsonl",
		"inv1_explained_window.jsonl",
		"inv1_fence_and_promotion_between_polls.jsonl",
		"inv4_async_within_abandoned.jsonl",
		"inv4_async_deposed_before_fence.jsonl",
		"inv4_async_unseen_before_decision.jsonl",
		"inv4_semisync_fallback_within_abandoned.jsonl",
		"lease_grant_after_revocation.jsonl",
		"lease_grant_after_expiry.jsonl",
	} {
		t.Run(file, func(t *testing.T) {
			code, rep, stderr := checkFile(t, filepath.Join("testdata", file))
			if code != 0 || len(rep.Anomalies) != 0 {
				t.Fatalf("exit %d, anomalies %+v, stderr %q; want a clean pass", code, rep, stderr)
			}
			if file == "inv4_async_unseen_before_decision.jsonl" && rep.Writes.LostUnseen != 1 {
				t.Errorf("writes %+v, want the write after the last sighting counted: lostUnseen=1", rep.Writes)
			}
			if strings.Contains(file, "deposed_before_fence") && (rep.Writes.Lost != 1 || rep.Writes.LostDeposed != 1) {
				t.Errorf("writes %+v, want the deposed primary's write counted: lost=1 lostDeposed=1", rep.Writes)
			}
			if file == "inv4_semisync_fallback_within_abandoned.jsonl" && (rep.Writes.Lost != 1 || rep.Writes.LostFallback != 1 || rep.Writes.LostUnseen != 0) {
				t.Errorf("writes %+v, want the write in the fallback window counted against the decision: lost=1 lostFallback=1 lostUnseen=0", rep.Writes)
			}
		})
	}
}

// With semi-sync on, a missing ok write is allowed only inside a fallback
// window of its site (from the last poll that saw the primary side on
// before one that saw it off, to the first later poll that saw it on with
// commits waiting), and there only as an asynchronous loss; a deposed
// primary's writes are in no window, before its fence or after it.
func TestSemiSyncFallbackWindows(t *testing.T) {
	cases := []struct {
		file                    string
		lost, fallback, deposed int
		anomalous               []string // the writes named by an anomaly
	}{
		// Its async counterpart, inv4_async_deposed_before_fence.jsonl,
		// passes with lostDeposed=1.
		{"inv4_semisync_deposed_before_fence.jsonl", 1, 0, 0, []string{"ok write 2 (site east) is missing from final: acknowledged by the deposed primary east before its fence"}},
		{"inv4_semisync_fallback_within_abandoned.jsonl", 1, 1, 0, nil},
		{"inv4_semisync_fallback_not_abandoned.jsonl", 1, 1, 0, []string{"ok write 2 (site east) is missing from final and no emergency decision from that site abandoned it (acknowledged in the semi-sync fallback window of east from 1000.0ms to 6000.0ms)"}},
		// Write 2 returned before the window opened (the last poll that saw
		// the switch on), write 5 after the first poll that saw it on with
		// commits waiting; write 4 returned after a poll that saw it on
		// without commits waiting (a replica catching up): still inside.
		{"inv4_semisync_outside_fallback_window.jsonl", 4, 2, 0, []string{"ok write 2 (site east) is missing from final with semi-sync on", "ok write 5 (site east) is missing from final with semi-sync on"}},
		{"inv4_semisync_fallback_deposed.jsonl", 1, 0, 0, []string{"ok write 2 (site east) is missing from final with semi-sync on"}},
		// The same, with the site seen fenced after the write: a deposed
		// primary's write before its fence, on a site the operator had
		// fallen back on before the decision, is the asynchronous window's.
		{"inv4_semisync_deposed_after_fallback.jsonl", 1, 0, 1, nil},
		// Polls without the fields open no window.
		{"inv4_semisync_lost.jsonl", 1, 0, 0, []string{"ok write 1 (site east) is missing from final with semi-sync on"}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			_, rep, stderr := checkFile(t, filepath.Join("testdata", c.file))
			if rep == nil {
				t.Fatalf("no report: %s", stderr)
			}
			if rep.Writes.Lost != c.lost || rep.Writes.LostFallback != c.fallback || rep.Writes.LostDeposed != c.deposed {
				t.Errorf("writes %+v, want lost=%d lostFallback=%d lostDeposed=%d", rep.Writes, c.lost, c.fallback, c.deposed)
			}
			var causes []string
			for _, a := range rep.Anomalies {
				causes = append(causes, a.Cause)
			}
			if len(causes) != len(c.anomalous) {
				t.Fatalf("anomalies %q, want %q", causes, c.anomalous)
			}
			for i, want := range c.anomalous {
				if !strings.HasPrefix(causes[i], want) {
					t.Errorf("anomaly %d is %q, want %q", i, causes[i], want)
				}
			}
		})
	}
}

// The correct run's summary counts what it holds, and every record type
// appears in it (so the pass above covers each of them).
func TestValidSummary(t *testing.T) {
	code, rep, _ := checkFile(t, filepath.Join("testdata", "valid.jsonl"))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if rep.Seed != 42 || rep.Flavor != "mariadb" || !rep.SemiSync || rep.Faults["partition"] != 1 {
		t.Errorf("header or faults wrong: %+v", rep)
	}
	if rep.Writes.OK != 3 || rep.Writes.Fail != 1 || rep.Writes.Unknown != 1 || rep.Writes.Lost != 0 {
		t.Errorf("writes %+v, want ok=3 fail=1 unknown=1 lost=0", rep.Writes)
	}
	if rep.LeaseCalls != 10 || rep.Revocations != 1 || rep.Decisions != 3 {
		t.Errorf("lease calls %d revocations %d decisions %d", rep.LeaseCalls, rep.Revocations, rep.Decisions)
	}
	f, err := os.Open(filepath.Join("testdata", "valid.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{"run": true}
	kinds := map[string]bool{}
	for _, r := range h.Records {
		types[r.Type] = true
		if r.Type == "decision" {
			kinds[r.Kind] = true
		}
	}
	for typ := range requiredFields {
		if !types[typ] {
			t.Errorf("valid.jsonl has no %q record", typ)
		}
	}
	if !kinds["planned"] || !kinds["emergency"] {
		t.Errorf("valid.jsonl decisions %v, want a planned and an emergency one", kinds)
	}
}

// The Porcupine model on its own: the linearizability check, apart from the
// interval check of invariant 3.
func TestLeaseModel(t *testing.T) {
	cases := []struct {
		file         string
		linearizable bool
	}{
		{"inv3_overlapping_grants.jsonl", false},
		{"inv3_grant_after_own_revocation.jsonl", false},
		{"inv3_renew_without_grant.jsonl", false},
		{"lease_grant_after_revocation.jsonl", true},
		// Revoked and fenced, but its client was told "until 5 s": the
		// server must not grant another operation before then.
		{"lease_grant_inside_revoked_deadline.jsonl", false},
		{"lease_grant_after_expiry.jsonl", true},
		{"valid.jsonl", true},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			h := readTestHistory(t, filepath.Join("testdata", c.file))
			a, err := checkLeaseLinearizability(h, "")
			if err != nil {
				t.Fatal(err)
			}
			if (a == nil) != c.linearizable {
				t.Fatalf("linearizable=%t, want %t (anomaly %+v)", a == nil, c.linearizable, a)
			}
			if a != nil && (a.Invariant != 3 || len(a.Lines) == 0) {
				t.Errorf("anomaly %+v, want invariant 3 with the calls that show it", a)
			}
		})
	}
}

// A call with no answer may or may not have taken effect: a 409 held seen
// by another operation is explained by it having taken effect, a later
// grant to another by it not (or by it confirming nothing to its client).
func TestLeasePendingCall(t *testing.T) {
	header := `{"type":"run","seed":1,"flavor":"mysql","semiSync":true,"group":"g","sites":["east","west"],"probeIntervalMs":1000,"failureThreshold":3,"probeTimeoutMs":500,"fenceBoundMs":2000,"startUs":1000000}`
	pending := `{"type":"lease","client":"a","operationId":"op-a","kind":"migration","call":"acquire","callUs":1000000,"retUs":1100000,"error":"timeout"}`
	held := `{"type":"lease","client":"b","operationId":"op-b","kind":"migration","call":"acquire","callUs":1200000,"retUs":1210000,"status":409,"error":"held"}`
	grant := `{"type":"lease","client":"c","operationId":"op-c","kind":"migration","call":"acquire","callUs":1300000,"retUs":1310000,"status":201,"confirmedUntilUs":2000000}`
	cases := []struct {
		name         string
		lines        []string
		linearizable bool
	}{
		{"held explained by the pending acquire", []string{header, pending, held}, true},
		{"held with nobody who could hold it", []string{header, held}, false},
		{"grant after a pending acquire", []string{header, pending, grant}, true},
		{"held then grant", []string{header, pending, held, grant}, true},
		// A revocation known to the second: a renewal answered inside that
		// second may have come before it; one answered after it may not.
		{"renewal inside the revocation's second", []string{header, grant,
			`{"type":"revocation","operationId":"op-c","kind":"migration","reason":"OperatorRevoked","generation":1,"at":1400000,"windowUs":1000000}`,
			`{"type":"lease","client":"c","operationId":"op-c","kind":"migration","call":"renew","callUs":1500000,"retUs":1510000,"status":200,"confirmedUntilUs":2500000}`}, true},
		{"renewal after the revocation's second", []string{header, grant,
			`{"type":"revocation","operationId":"op-c","kind":"migration","reason":"OperatorRevoked","generation":1,"at":1400000,"windowUs":50000}`,
			`{"type":"lease","client":"c","operationId":"op-c","kind":"migration","call":"renew","callUs":1500000,"retUs":1510000,"status":200,"confirmedUntilUs":2500000}`}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.jsonl")
			if err := os.WriteFile(path, []byte(strings.Join(c.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			a, err := checkLeaseLinearizability(readTestHistory(t, path), "")
			if err != nil {
				t.Fatal(err)
			}
			if (a == nil) != c.linearizable {
				t.Fatalf("linearizable=%t, want %t", a == nil, c.linearizable)
			}
		})
	}
}

func readTestHistory(t *testing.T, path string) *History {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Malformed input exits 2 and names the line.
func TestMalformedInput(t *testing.T) {
	header := `{"type":"run","seed":1,"flavor":"mysql","semiSync":true,"group":"g","sites":["east","west"],"probeIntervalMs":1000,"failureThreshold":3,"probeTimeoutMs":500,"fenceBoundMs":2000,"startUs":1000000}`
	long := filepath.Join(t.TempDir(), "long.jsonl")
	oversized := header + "\n" + `{"type":"final","site":"east","values":[` + strings.Repeat("1,", maxLineBytes/2) + "1]}\n"
	if err := os.WriteFile(long, []byte(oversized), 0o644); err != nil {
		t.Fatal(err)
	}
	// The same line as the last one, with no newline after it.
	longLast := filepath.Join(t.TempDir(), "longlast.jsonl")
	if err := os.WriteFile(longLast, []byte(strings.TrimSuffix(oversized, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	noHeader := filepath.Join(t.TempDir(), "noheader.jsonl")
	if err := os.WriteFile(noHeader, []byte(`{"type":"leader","at":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A poll that answered must say what it read; one that did not, need not.
	answered := filepath.Join(t.TempDir(), "answered.jsonl")
	polls := header + "\n" + `{"type":"poll","site":"east","at":1000001,"ok":false,"writable":false}` + "\n" +
		`{"type":"poll","site":"east","at":1000002,"ok":true,"writable":true}` + "\n"
	if err := os.WriteFile(answered, []byte(polls), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, want string
	}{
		{answered, `line 3: poll record misses field "readOnly"`},
		{filepath.Join("testdata", "malformed_bad_json.jsonl"), "line 3: not a JSON object"},
		{filepath.Join("testdata", "malformed_unknown_type.jsonl"), `line 2: unknown record type "gossip"`},
		{filepath.Join("testdata", "malformed_missing_field.jsonl"), `line 3: write record misses field "value"`},
		{long, "line 2: line longer than"},
		{longLast, "line 2: line longer than"},
		{noHeader, "line 1: the first record must be the run header"},
		{filepath.Join("testdata", "does-not-exist.jsonl"), "no such file"},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			code, _, stderr := checkFile(t, c.path)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d stderr %q, want 2 and %q", code, stderr, c.want)
			}
		})
	}
}

// The text table names the run, the counts (the lost writes by window
// among them) and each anomaly with its invariant and the lines of its
// excerpt; --visualize writes Porcupine's page.
func TestTableAndVisualization(t *testing.T) {
	var stdout, stderr bytes.Buffer
	html := filepath.Join(t.TempDir(), "lease.html")
	code := run([]string{"--visualize", html, filepath.Join("testdata", "inv3_overlapping_grants.jsonl")}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"seed=7", "flavor=mysql", "lease calls  2", "[invariant 3] confirmed migration leases overlap", "line 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	stdout.Reset()
	if code := run([]string{filepath.Join("testdata", "inv4_semisync_fallback_within_abandoned.jsonl")}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if want := "lost=1 (deposed primary before its fence: 0; after the operators last saw it: 0; in a semi-sync fallback window: 1)"; !strings.Contains(stdout.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, stdout.String())
	}
	page, err := os.ReadFile(html)
	if err != nil || !bytes.Contains(page, []byte("<html")) {
		t.Fatalf("visualization not written: %v", err)
	}
}
