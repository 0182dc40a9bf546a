package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
)

// maxLineBytes bounds one history line: a longer line is malformed input,
// never a reason to grow a buffer without limit.
const maxLineBytes = 1 << 20

// Record is one line of the history. The fields of every record type share
// one struct: a field name means the same thing (and has the same JSON type)
// wherever it appears in docs/nemesis.md. Optional fields are pointers so
// that "absent" stays distinct from zero.
type Record struct {
	Line int    `json:"-"`
	Type string `json:"type"`

	// run
	Seed             *int64   `json:"seed,omitempty"`
	Flavor           string   `json:"flavor,omitempty"`
	SemiSync         *bool    `json:"semiSync,omitempty"`
	Group            string   `json:"group,omitempty"`
	Sites            []string `json:"sites,omitempty"`
	ProbeIntervalMs  int64    `json:"probeIntervalMs,omitempty"`
	FailureThreshold int64    `json:"failureThreshold,omitempty"`
	ProbeTimeoutMs   int64    `json:"probeTimeoutMs,omitempty"`
	FenceBoundMs     int64    `json:"fenceBoundMs,omitempty"`
	StartUs          int64    `json:"startUs,omitempty"`
	EndUs            *int64   `json:"endUs,omitempty"`

	// nemesis
	ID      string          `json:"id,omitempty"`
	Fault   string          `json:"fault,omitempty"`
	Action  string          `json:"action,omitempty"`
	Targets []string        `json:"targets,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`

	// write, final
	Client string  `json:"client,omitempty"`
	Value  int64   `json:"value,omitempty"`
	Site   string  `json:"site,omitempty"`
	CallUs int64   `json:"callUs,omitempty"`
	RetUs  int64   `json:"retUs,omitempty"`
	Result string  `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
	Values []int64 `json:"values,omitempty"`

	// lease, fence, revocation
	OperationID      string `json:"operationId,omitempty"`
	Kind             string `json:"kind,omitempty"`
	Call             string `json:"call,omitempty"`
	Status           *int   `json:"status,omitempty"`
	Generation       *int64 `json:"generation,omitempty"`
	ConfirmedUntilUs *int64 `json:"confirmedUntilUs,omitempty"`
	Reason           string `json:"reason,omitempty"`
	At               int64  `json:"at,omitempty"`
	WindowUs         int64  `json:"windowUs,omitempty"` // revocation: it happened within [at, at+windowUs]
	StoppedUs        int64  `json:"stoppedUs,omitempty"`
	DeadlineUs       int64  `json:"deadlineUs,omitempty"`

	// poll, probe
	OK            *bool  `json:"ok,omitempty"`
	ReadOnly      *bool  `json:"readOnly,omitempty"`
	SuperReadOnly *bool  `json:"superReadOnly,omitempty"`
	Writable      *bool  `json:"writable,omitempty"`
	From          string `json:"from,omitempty"`
	// poll, when the server has them: its primary side of semi-sync
	// switched on, and commits waiting for an acknowledgement.
	SemiSyncEnabled *bool `json:"semiSyncEnabled,omitempty"`
	SemiSyncActive  *bool `json:"semiSyncActive,omitempty"`

	// status, decision, leader
	ActiveSite      string   `json:"activeSite,omitempty"`
	Conditions      []string `json:"conditions,omitempty"`
	ResourceVersion string   `json:"resourceVersion,omitempty"`
	Abandoned       int64    `json:"abandoned,omitempty"`
	Holder          string   `json:"holder,omitempty"`
}

// requiredFields lists, per record type, the fields a line must carry.
// The header `run` line is checked separately (its later copy only carries
// `endUs`).
var requiredFields = map[string][]string{
	"nemesis":    {"id", "at", "fault", "action", "targets"},
	"write":      {"client", "value", "callUs", "retUs", "result"},
	"final":      {"site", "values"},
	"lease":      {"client", "operationId", "kind", "call", "callUs", "retUs"},
	"fence":      {"client", "operationId", "reason", "at", "stoppedUs", "deadlineUs"},
	"revocation": {"operationId", "kind", "reason", "generation", "at"},
	"poll":       {"site", "at", "ok", "writable"}, // and readOnly when ok
	"probe":      {"from", "site", "callUs", "retUs", "ok"},
	"status":     {"at", "generation", "activeSite", "conditions", "resourceVersion"},
	"decision":   {"at", "generation", "activeSite", "kind"},
	"leader":     {"at"},
	// What the runner did as the runbook's person (made the decided
	// site writable on NoPrimary), after every fault ended.
	"person": {"at", "site", "action"},
}

var headerFields = []string{"seed", "flavor", "semiSync", "group", "sites",
	"probeIntervalMs", "failureThreshold", "probeTimeoutMs", "fenceBoundMs", "startUs"}

// InputError is malformed input; it names the line.
type InputError struct {
	Line int
	Msg  string
}

func (e *InputError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// History is a parsed run.
type History struct {
	Run     Record // the header, with endUs from a later run line if any
	Records []Record
}

// ReadHistory parses a history, rejecting any line that is not a known,
// complete record.
func ReadHistory(r io.Reader) (*History, error) {
	br := bufio.NewReaderSize(r, 64*1024)
	h := &History{}
	line := 0
	for {
		raw, err := readLine(br)
		if raw == nil && err == io.EOF {
			break
		}
		line++
		if err != nil && err != io.EOF {
			if errors.Is(err, errLineTooLong) {
				return nil, &InputError{line, fmt.Sprintf("line longer than %d bytes", maxLineBytes)}
			}
			return nil, &InputError{line, err.Error()}
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			if err == io.EOF {
				break
			}
			continue
		}
		var fields map[string]json.RawMessage
		if jerr := json.Unmarshal(raw, &fields); jerr != nil {
			return nil, &InputError{line, "not a JSON object: " + jerr.Error()}
		}
		var rec Record
		if jerr := json.Unmarshal(raw, &rec); jerr != nil {
			return nil, &InputError{line, "bad field: " + jerr.Error()}
		}
		rec.Line = line
		if rec.Type == "" {
			return nil, &InputError{line, "missing field \"type\""}
		}
		need := requiredFields[rec.Type]
		switch {
		case rec.Type == "run" && len(h.Records) == 0 && h.Run.Type == "":
			need = headerFields
		case rec.Type == "run":
			need = []string{"endUs"}
		case need == nil:
			return nil, &InputError{line, fmt.Sprintf("unknown record type %q", rec.Type)}
		case h.Run.Type == "":
			return nil, &InputError{line, "the first record must be the run header (type \"run\")"}
		}
		if rec.Type == "poll" && string(fields["ok"]) == "true" {
			// A poll that got no answer has no variables to report.
			need = append(append([]string(nil), need...), "readOnly")
		}
		for _, f := range need {
			v, ok := fields[f]
			if !ok || string(v) == "null" {
				return nil, &InputError{line, fmt.Sprintf("%s record misses field %q", rec.Type, f)}
			}
		}
		if rec.Type == "run" {
			if h.Run.Type == "" {
				if len(rec.Sites) != 2 {
					return nil, &InputError{line, "run header must name two sites"}
				}
				h.Run = rec
			} else {
				h.Run.EndUs = rec.EndUs
			}
			if err == io.EOF {
				break
			}
			continue
		}
		h.Records = append(h.Records, rec)
		if err == io.EOF {
			break
		}
	}
	if h.Run.Type == "" {
		return nil, &InputError{1, "empty history: no run header"}
	}
	return h, nil
}

var errLineTooLong = errors.New("line too long")

// readLine returns one line without its newline, or errLineTooLong once the
// line passes maxLineBytes (the rest of it is not read).
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxLineBytes+1 {
			return buf, errLineTooLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			if len(buf) == 0 {
				return nil, io.EOF
			}
			if len(bytes.TrimRight(buf, "\r\n")) > maxLineBytes {
				return buf, errLineTooLong
			}
			return buf, io.EOF
		}
		if err != nil {
			return buf, err
		}
		if len(bytes.TrimRight(buf, "\r\n")) > maxLineBytes {
			return buf, errLineTooLong
		}
		return buf, nil
	}
}

// recordTime is the time a record is placed at in an excerpt.
func recordTime(r *Record) int64 {
	switch r.Type {
	case "write", "lease", "probe":
		return r.CallUs
	case "final":
		return 1<<62 - 1
	}
	return r.At
}

// ofType returns the records of one type, ordered by time.
func (h *History) ofType(t string) []*Record {
	var out []*Record
	for i := range h.Records {
		if h.Records[i].Type == t {
			out = append(out, &h.Records[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return recordTime(out[i]) < recordTime(out[j]) })
	return out
}
