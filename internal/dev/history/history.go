package history

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder collects the operations of one run. It is safe for concurrent use.
type Recorder struct {
	start  time.Time
	effect time.Duration

	mu      sync.Mutex
	ops     []porcupine.Operation
	pending map[*Pending]struct{}
}

// NewRecorder starts a history; times are nanoseconds since now. effect bounds how long
// after its call an operation whose outcome is unknown may take effect (0: at any time
// until the end of the history). A bound keeps the check tractable; an operation that took
// effect later shows as a violation, as it should: past its deadline, nothing may land.
func NewRecorder(effect time.Duration) *Recorder { return &Recorder{start: time.Now(), effect: effect} }

// Now is the history's clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// At converts a wall-clock time (a claim's expiry as the server stated it) to the history's
// clock.
func (r *Recorder) At(t time.Time) int64 { return int64(t.Sub(r.start)) }

// Call begins an operation of client; Done records it with its outcome.
func (r *Recorder) Call(client int, in Input) *Pending {
	p := &Pending{r: r, op: porcupine.Operation{ClientId: client, Input: in, Call: r.Now()}}
	r.mu.Lock()
	if r.pending == nil {
		r.pending = map[*Pending]struct{}{}
	}
	r.pending[p] = struct{}{}
	r.mu.Unlock()
	return p
}

// Oldest is how long the oldest operation called and not yet done has been waiting (0
// when none): a stalled call shows while it stalls.
func (r *Recorder) Oldest() time.Duration {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var oldest int64
	for p := range r.pending {
		oldest = max(oldest, now-p.op.Call)
	}
	return time.Duration(oldest)
}

// Pending is an operation called and not yet recorded.
type Pending struct {
	r  *Recorder
	op porcupine.Operation
	// last is when the operation was last sent again under its operation id (Retry).
	last int64
}

// Retry notes that the operation is sent again under its operation id, as a client does
// with an outcome it could not learn: the server replays the first outcome or acts once.
// The operation keeps its first call; an outcome still unknown after it may take effect
// until the effect bound after the last attempt.
func (p *Pending) Retry() { p.last = p.r.Now() }

// Done records the operation's outcome. An Unknown outcome is recorded as returning at the
// recorder's effect bound after its call, or its last retry (never, without a bound): it
// may take effect at any time until then.
func (p *Pending) Done(out Output) {
	p.op.Output, p.op.Return = out, p.r.Now()
	if out.Result == Unknown {
		p.op.Return = neverReturned
		if p.r.effect > 0 {
			p.op.Return = max(p.op.Call, p.last) + int64(p.r.effect)
		}
	}
	p.r.mu.Lock()
	p.r.ops = append(p.r.ops, p.op)
	delete(p.r.pending, p)
	p.r.mu.Unlock()
}

// neverReturned is the return time of an operation whose outcome is unknown.
const neverReturned = int64(1) << 62

// Len is how many operations were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Operations returns a copy of what was recorded.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// Save writes ops as JSON, one operation per line, for a look at a run afterwards (Load
// reads them back).
func Save(ops []porcupine.Operation, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, op := range ops {
		if err := enc.Encode(record{Client: op.ClientId, Call: op.Call, Return: op.Return, Input: op.Input.(Input), Output: op.Output.(Output)}); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// Load reads what Save wrote.
func Load(path string) ([]porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []porcupine.Operation
	dec := json.NewDecoder(f)
	for {
		var r record
		if err := dec.Decode(&r); err == io.EOF {
			return ops, nil
		} else if err != nil {
			return nil, err
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Call: r.Call, Return: r.Return, Input: r.Input, Output: r.Output})
	}
}

// record is one saved operation.
type record struct {
	Client       int
	Call, Return int64
	Input        Input
	Output       Output
}
