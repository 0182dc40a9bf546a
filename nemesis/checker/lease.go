package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The migration mutex of one group, as the sequential model Porcupine checks
// the lease calls against. The state is the holder's operationId, the end of
// the holder's confirmed interval (its confirmedUntilUs), and the set of
// revoked operations.
type mutexState struct {
	holder  string
	until   int64
	revoked string // sorted, comma-separated operationIds
}

func (s mutexState) isRevoked(op string) bool {
	if s.revoked == "" {
		return false
	}
	for _, r := range strings.Split(s.revoked, ",") {
		if r == op {
			return true
		}
	}
	return false
}

func (s mutexState) withRevoked(op string) mutexState {
	if s.isRevoked(op) {
		return s
	}
	ids := []string{op}
	if s.revoked != "" {
		ids = append(ids, strings.Split(s.revoked, ",")...)
	}
	sort.Strings(ids)
	s.revoked = strings.Join(ids, ",")
	return s
}

// leaseInput is one lease call, or a revocation (call "revoke", entered as
// an operation that took effect somewhere in [at, at+windowUs]: the time it
// is known by, a tombstone's creationTimestamp, has whole seconds).
type leaseInput struct {
	call        string
	operationID string
	retUs       int64
	line        int
}

// leaseOutput is the answer; pending marks a call with no answer, which may
// or may not have taken effect.
type leaseOutput struct {
	pending          bool
	status           int
	errCode          string
	confirmedUntilUs int64
}

// grantable says whether the mutex may be granted to op by the time the
// answer came back (retUs): it is free, already op's, or the holder's
// confirmed interval may have ended by then. A revoked holder keeps it until
// then too: its client may not have heard of the revocation.
func grantable(s mutexState, op string, retUs int64) bool {
	return s.holder == "" || s.holder == op || s.until <= retUs
}

// stepLease returns every state the mutex may be in after the call; none
// when the answer is impossible.
func stepLease(st interface{}, in interface{}, out interface{}) []interface{} {
	s := st.(mutexState)
	i := in.(leaseInput)
	o := out.(leaseOutput)
	if i.call == "revoke" {
		// The holder is marked, and keeps the mutex until its confirmed
		// deadline (it is never renewed again).
		return []interface{}{s.withRevoked(i.operationID)}
	}
	if o.pending {
		// No answer: the call may have done nothing, or taken effect. A
		// grant nobody heard confirms nothing to its client, so its
		// confirmed interval ends at once (until = 0).
		states := []interface{}{s}
		switch i.call {
		case "acquire":
			if grantable(s, i.operationID, math.MaxInt64) && !s.isRevoked(i.operationID) {
				n := s
				if n.holder != i.operationID {
					n.holder, n.until = i.operationID, 0
				}
				states = append(states, n)
			}
		case "release":
			if s.holder == i.operationID {
				n := s
				n.holder, n.until = "", 0
				states = append(states, n)
			}
		}
		return states
	}
	switch {
	case o.status == 200 || o.status == 201 || (o.status == 204 && i.call == "release"):
		switch i.call {
		case "acquire", "renew":
			if s.isRevoked(i.operationID) {
				return nil // a revoked operation is never granted again
			}
			if i.call == "renew" && s.holder != i.operationID {
				return nil // only the holder renews
			}
			if !grantable(s, i.operationID, i.retUs) {
				return nil
			}
			n := s
			n.holder = i.operationID
			if o.confirmedUntilUs > 0 {
				n.until = o.confirmedUntilUs
			}
			return []interface{}{n}
		case "release":
			n := s
			if n.holder == i.operationID {
				n.holder, n.until = "", 0
			}
			return []interface{}{n}
		}
		return nil
	case o.status == 409 && o.errCode == "revoked":
		if s.isRevoked(i.operationID) {
			return []interface{}{s}
		}
		return nil
	case o.status == 409 && o.errCode == "held":
		// held: someone else holds it, revoked or not (the server's TTL may
		// run past the holder's own confirmed deadline, so time is no bound
		// here).
		if s.holder != "" && s.holder != i.operationID {
			return []interface{}{s}
		}
		return nil
	case o.status == 404:
		// expired: op does not hold it, or its interval may have ended.
		if s.holder != i.operationID {
			return []interface{}{s}
		}
		if s.until <= i.retUs {
			n := s
			n.holder, n.until = "", 0
			return []interface{}{n}
		}
		return nil
	default:
		// 403 token_mismatch, 423 unstable, 5xx and transport failures
		// change nothing.
		return []interface{}{s}
	}
}

var leaseModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{mutexState{}} },
	Step: stepLease,
	DescribeOperation: func(in, out interface{}) string {
		i := in.(leaseInput)
		o := out.(leaseOutput)
		if i.call == "revoke" {
			return fmt.Sprintf("revoke(%s)", i.operationID)
		}
		if o.pending {
			return fmt.Sprintf("%s(%s) -> ?", i.call, i.operationID)
		}
		return fmt.Sprintf("%s(%s) -> %d %s until=%d", i.call, i.operationID, o.status, o.errCode, o.confirmedUntilUs)
	},
	DescribeState: func(st interface{}) string {
		s := st.(mutexState)
		return fmt.Sprintf("holder=%q until=%d revoked=[%s]", s.holder, s.until, s.revoked)
	},
}

// leaseOperations turns the migration lease calls and revocations into
// Porcupine operations. A call with no answer returns at +infinity: it may be
// linearized anywhere after its call, including never (after every other).
func leaseOperations(h *History) []porcupine.Operation {
	clients := map[string]int{}
	clientID := func(name string) int {
		if id, ok := clients[name]; ok {
			return id
		}
		clients[name] = len(clients)
		return clients[name]
	}
	var ops []porcupine.Operation
	for _, r := range h.ofType("lease") {
		if r.Kind != "migration" {
			continue
		}
		out := leaseOutput{pending: r.Status == nil, errCode: r.Error}
		ret := r.RetUs
		if r.Status == nil {
			ret = math.MaxInt64
		} else {
			out.status = *r.Status
		}
		if r.ConfirmedUntilUs != nil {
			out.confirmedUntilUs = *r.ConfirmedUntilUs
		}
		ops = append(ops, porcupine.Operation{
			ClientId: clientID(r.Client),
			Input:    leaseInput{call: r.Call, operationID: r.OperationID, retUs: r.RetUs, line: r.Line},
			Call:     r.CallUs, Output: out, Return: ret,
		})
	}
	for _, r := range h.ofType("revocation") {
		if r.Kind != "migration" {
			continue
		}
		ops = append(ops, porcupine.Operation{
			ClientId: clientID("revocations"),
			Input:    leaseInput{call: "revoke", operationID: r.OperationID, retUs: r.At, line: r.Line},
			Call:     r.At, Output: leaseOutput{}, Return: r.At + r.WindowUs,
		})
	}
	return ops
}

// checkLeaseLinearizability runs Porcupine over the lease calls; on a
// violation it returns the anomaly (invariant 3) and, when asked, writes the
// visualization.
func checkLeaseLinearizability(h *History, visualize string) (*Anomaly, error) {
	ops := leaseOperations(h)
	if len(ops) == 0 {
		return nil, nil
	}
	model := leaseModel.ToModel()
	result, info := porcupine.CheckOperationsVerbose(model, ops, 60*time.Second)
	if visualize != "" {
		if err := porcupine.VisualizePath(model, info, visualize); err != nil {
			return nil, fmt.Errorf("writing the visualization: %w", err)
		}
	}
	switch result {
	case porcupine.Ok:
		return nil, nil
	case porcupine.Unknown:
		return &Anomaly{Invariant: 3, Cause: "lease calls: linearizability undecided within 60s (treated as an anomaly)"}, nil
	}
	// Show the longest partial linearization's last calls and the first
	// call (by invocation) it could not place after them.
	best := []int{}
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	placed := map[int]bool{}
	for _, i := range best {
		placed[i] = true
	}
	var lines []int
	tail := best
	if len(tail) > 4 {
		tail = tail[len(tail)-4:]
	}
	for _, i := range tail {
		lines = append(lines, ops[i].Input.(leaseInput).line)
	}
	first := -1
	for i, op := range ops {
		if !placed[i] && (first < 0 || op.Call < ops[first].Call) {
			first = i
		}
	}
	if first >= 0 {
		lines = append(lines, ops[first].Input.(leaseInput).line)
	}
	sort.Ints(lines)
	return &Anomaly{Invariant: 3, Cause: "lease calls are not linearizable against one mutex with a TTL and revocations", Lines: lines}, nil
}
