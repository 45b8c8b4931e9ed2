// Frames: a 4-byte big-endian length followed by that many bytes of one serialized protobuf
// message.
//
// Invariants of the framing:
//   - A length is checked against the caller's cap before any allocation, so a hostile peer
//     cannot make the reader allocate more than the cap.
//   - Decoding is strict: a message with unknown fields (at any depth) or invalid encoding is
//     refused, never partially trusted.
//   - Frames are read with io.ReadFull: a short frame is an error, never a truncated message.

package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Caps on frame sizes. File content and command output travel inside one frame; the profile
// package bounds a file at 24 MiB and each output stream at 8 MiB, so 32 MiB of payload plus
// headroom for the envelope covers every legitimate frame.
const (
	// MaxRequestBytes bounds a request frame (gateway → helper).
	MaxRequestBytes = 32<<20 + 64<<10
	// MaxResponseBytes bounds a response frame (helper → gateway).
	MaxResponseBytes = 32<<20 + 64<<10
	// headerBytes is the size of the length prefix.
	headerBytes = 4
)

// Errors.
var (
	// ErrFrameTooLarge: the length prefix exceeds the cap.
	ErrFrameTooLarge = errors.New("frame exceeds the size cap")
	// ErrFrameTruncated: the stream ended inside a frame.
	ErrFrameTruncated = errors.New("truncated frame")
	// ErrInvalidFrame: the payload is not a valid message of the expected type.
	ErrInvalidFrame = errors.New("invalid frame payload")
)

// WriteFrame writes msg as one frame. It refuses messages over max.
func WriteFrame(w io.Writer, msg proto.Message, max int) error {
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return fmt.Errorf("marshal: %w", err)
	}
	return WritePayload(w, payload, max)
}

// WritePayload writes an encoded message as one frame. It refuses payloads over max.
func WritePayload(w io.Writer, payload []byte, max int) error {
	return WriteEncoded(w, Whole(payload), max)
}

// WriteEncoded writes a frame whose payload is e.Head then e.Body: in one Write when it is
// small, else the header, the head and the start of the body joined into one Write of
// streamMessageBytes, then the rest of the body (every caller is its stream's only
// writer). It refuses payloads over limit.
func WriteEncoded(w io.Writer, e Encoded, limit int) error {
	n := e.Len()
	if n > limit {
		return fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, n, limit)
	}
	head, body := e.Head, e.Body
	if n <= joinBytes {
		head, body = append(head[:len(head):len(head)], body...), nil
	} else if len(body) == 0 {
		head, body = nil, head
	}
	// The exec stream carries stdin in messages of what one Read returns: a header and head
	// written alone would be a message of a few bytes of their own, through the API server.
	carry := min(len(body), max(0, streamMessageBytes-headerBytes-len(head)))
	buf := make([]byte, headerBytes, headerBytes+len(head)+carry)
	binary.BigEndian.PutUint32(buf, uint32(n))
	buf = append(append(buf, head...), body[:carry]...)
	if _, err := w.Write(buf); err != nil || carry == len(body) {
		return err
	}
	_, err := w.Write(body[carry:])
	return err
}

// joinBytes: frames up to this size are written in one Write (one system call, one stream
// message); above it the body's copy costs more than a second Write.
const joinBytes = 64 << 10

// streamMessageBytes is what client-go's exec stream reads from stdin at a time (and the
// size of its WebSocket messages).
const streamMessageBytes = 32 << 10

// ReadFrame reads one frame into msg. It returns io.EOF when the stream ends cleanly before a
// frame starts, and ErrFrameTooLarge, ErrFrameTruncated or ErrInvalidFrame otherwise.
func ReadFrame(r io.Reader, msg proto.Message, max int) error {
	payload, err := readPayload(r, max)
	if err != nil {
		return err
	}
	return DecodeFrame(payload, msg)
}

// readPayload reads one frame's payload, its length checked against max first.
func readPayload(r io.Reader, max int) ([]byte, error) {
	payload, _, err := readPooled(r, max, false)
	return payload, err
}

// payloads recycles the buffers of large frames a reader gives back (Piece.Release): a
// 5 MiB body is then read into the same few buffers, not twenty fresh zeroed ones.
var payloads sync.Pool

// pooledFrom is the smallest payload read into a recycled buffer.
const pooledFrom = 64 << 10

// readPooled is readPayload, into a recycled buffer when pooled is asked for and the
// payload is large (the buffer is returned then, for the caller to give back or drop).
func readPooled(r io.Reader, max int, pooled bool) ([]byte, *[]byte, error) {
	var header [headerBytes]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, io.EOF
		}
		return nil, nil, fmt.Errorf("%w: header: %v", ErrFrameTruncated, err)
	}
	n := binary.BigEndian.Uint32(header[:])
	if uint64(n) > uint64(max) {
		return nil, nil, fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, n, max)
	}
	var buf *[]byte
	var payload []byte
	if pooled && n >= pooledFrom {
		buf, _ = payloads.Get().(*[]byte)
		if buf == nil || cap(*buf) < int(n) {
			b := make([]byte, n)
			buf = &b
		}
		payload = (*buf)[:n]
	} else {
		payload = make([]byte, n)
	}
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, nil, fmt.Errorf("%w: payload: %v", ErrFrameTruncated, err)
	}
	return payload, buf, nil
}

// DecodeFrame strictly unmarshals payload into msg.
func DecodeFrame(payload []byte, msg proto.Message) error {
	if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(payload, msg); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidFrame, err)
	}
	if hasUnknown(msg.ProtoReflect()) {
		return fmt.Errorf("%w: unknown fields", ErrInvalidFrame)
	}
	return nil
}

// hasUnknown reports whether m or any message inside it carries unknown fields.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				if hasUnknown(l.Get(i).Message()) {
					found = true
					return false
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if hasUnknown(mv.Message()) {
					found = true
				}
				return !found
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			if hasUnknown(v.Message()) {
				found = true
			}
		}
		return !found
	})
	return found
}
