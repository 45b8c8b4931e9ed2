package process

import executionv1 "github.com/execplane/execplane/proto/execution/v1"

// capture keeps the head and the tail of a stream within a cap, counting every byte.
type capture struct {
	limit int
	head  []byte // up to limit bytes
	ring  []byte // the last bytes past head, a ring of limit - limit/2 bytes
	pos   int    // next write position in ring
	full  bool   // the ring has wrapped
	total uint64
}

func newCapture(limit int) *capture {
	return &capture{limit: limit, head: make([]byte, 0, min(limit, 64<<10))}
}

// Write never fails: the command's output is consumed whatever its size.
func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += uint64(n)
	if room := c.limit - len(c.head); room > 0 {
		take := min(room, len(p))
		c.head = append(c.head, p[:take]...)
		p = p[take:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if c.ring == nil {
		c.ring = make([]byte, c.limit-c.limit/2)
	}
	if len(p) >= len(c.ring) {
		copy(c.ring, p[len(p)-len(c.ring):])
		c.pos, c.full = 0, true
		return n, nil
	}
	k := copy(c.ring[c.pos:], p)
	if k < len(p) {
		copy(c.ring, p[k:])
		c.full = true
	}
	if c.pos+len(p) >= len(c.ring) {
		c.full = true
	}
	c.pos = (c.pos + len(p)) % len(c.ring)
	return n, nil
}

// Captured renders the capture: everything in head when it fits, otherwise the first half of
// the cap in head and the last bytes in tail.
func (c *capture) Captured() *executionv1.CapturedOutput {
	out := &executionv1.CapturedOutput{TotalBytes: c.total}
	if c.total <= uint64(c.limit) {
		out.Head = c.head
		return out
	}
	half := c.limit / 2
	tailLen := c.limit - half
	var overflow []byte
	if c.full {
		overflow = append(append([]byte{}, c.ring[c.pos:]...), c.ring[:c.pos]...)
	} else {
		overflow = append([]byte{}, c.ring[:c.pos]...)
	}
	joined := append(append([]byte{}, c.head[half:]...), overflow...)
	out.Head = c.head[:half]
	out.Tail = joined[len(joined)-tailLen:]
	out.Truncated = true
	return out
}
