package protocol

import (
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds of a session (docs/sessions.md). Both ends read them from here.
const (
	// DefaultChunkBytes is the chunk size the gateway asks for: a 5 MiB transfer is 20
	// chunks, each a few milliseconds on the exec stream, so a small operation waits at most
	// one chunk behind a large one.
	DefaultChunkBytes = 256 << 10
	// MinChunkBytes and MaxChunkBytes bound what either end accepts.
	MinChunkBytes = 16 << 10
	MaxChunkBytes = 1 << 20
	// chunkEnvelopeBytes is room for a frame's envelope around chunk_bytes of payload (ids,
	// tags, lengths; a small request's limits and paths): every session frame is at most
	// SessionFrameCap(chunk) bytes.
	chunkEnvelopeBytes = 16 << 10
	// DefaultMaxInFlight is how many requests the gateway keeps in flight on one session.
	DefaultMaxInFlight = 16
	// MaxInFlightCeiling is the most a helper accepts: each running command is a process.
	MaxInFlightCeiling = 64
	// DefaultSessionHeartbeat is the session heartbeat the gateway asks for; it reads a
	// session that stays silent for SilenceFactor intervals as broken.
	DefaultSessionHeartbeat = 5 * time.Second
	// MinSessionHeartbeat and MaxSessionHeartbeat bound the interval both ends accept.
	MinSessionHeartbeat = 100 * time.Millisecond
	MaxSessionHeartbeat = time.Minute
	// SilenceFactor: heartbeat intervals without a frame after which a session is broken.
	SilenceFactor = 3
	// MaxRequestIDBytes bounds a request id (the protocol documents 64).
	MaxRequestIDBytes = 64
)

// SessionFrameCap is the largest frame of a session whose chunks are chunk bytes.
func SessionFrameCap(chunk int) int { return chunk + chunkEnvelopeBytes }

// SessionVersion reports whether v is a session version: 2, 3 (durable requests carry
// record keys) or 4 (and starts may be replays only).
func SessionVersion(v helperv1.ProtocolVersion) bool {
	return v >= helperv1.ProtocolVersion_PROTOCOL_VERSION_2 && v <= helperv1.ProtocolVersion_PROTOCOL_VERSION_4
}

// SealsRecords reports whether a session's durable requests may carry record keys.
func SealsRecords(r *helperv1.SessionReady) bool {
	return r.GetVersion() >= helperv1.ProtocolVersion_PROTOCOL_VERSION_3
}

// ReplaysOnly reports whether a session's durable starts may be replays only
// (DurableStart.replay_only).
func ReplaysOnly(r *helperv1.SessionReady) bool {
	return r.GetVersion() >= helperv1.ProtocolVersion_PROTOCOL_VERSION_4
}

// NewHello is the gateway's opening frame.
func NewHello(maxInFlight, chunk int, heartbeat time.Duration) *helperv1.SessionFrame {
	return &helperv1.SessionFrame{Frame: &helperv1.SessionFrame_Hello{Hello: &helperv1.SessionHello{
		Versions: []helperv1.ProtocolVersion{helperv1.ProtocolVersion_PROTOCOL_VERSION_4, helperv1.ProtocolVersion_PROTOCOL_VERSION_3,
			helperv1.ProtocolVersion_PROTOCOL_VERSION_2},
		MaxInFlight:     uint32(maxInFlight),
		ChunkBytes:      uint32(chunk),
		HeartbeatMillis: uint64(heartbeat / time.Millisecond),
		Bodies:          true,
	}}}
}

// Accept is the helper's answer to a hello: every value the smaller of what was asked and
// what the helper allows, or an UNSUPPORTED_VERSION / INVALID_ARGUMENT refusal.
func Accept(h *helperv1.SessionHello) (*helperv1.SessionReady, error) {
	version := helperv1.ProtocolVersion_PROTOCOL_VERSION_UNSPECIFIED
	for _, v := range h.GetVersions() {
		if SessionVersion(v) && v > version {
			version = v
		}
	}
	if version == helperv1.ProtocolVersion_PROTOCOL_VERSION_UNSPECIFIED {
		return nil, Errorf(helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION, "no common session protocol version")
	}
	r := &helperv1.SessionReady{
		Version:         version,
		MaxInFlight:     min(h.GetMaxInFlight(), MaxInFlightCeiling),
		ChunkBytes:      min(h.GetChunkBytes(), MaxChunkBytes),
		HeartbeatMillis: h.GetHeartbeatMillis(),
		Bodies:          h.GetBodies(), // only to a gateway that asked: it knows the field
	}
	if err := checkSession(r); err != nil {
		return nil, err
	}
	return r, nil
}

// CheckReady validates the helper's answer against the hello: the version asked for and
// nothing above what the gateway asked (a hostile helper cannot raise a bound).
func CheckReady(h *helperv1.SessionHello, r *helperv1.SessionReady) error {
	switch {
	case !SessionVersion(r.GetVersion()) || !slices.Contains(h.GetVersions(), r.GetVersion()):
		return fmt.Errorf("%w: session version %d", ErrViolation, r.GetVersion())
	case r.GetMaxInFlight() > h.GetMaxInFlight(), r.GetChunkBytes() > h.GetChunkBytes(), r.GetHeartbeatMillis() > h.GetHeartbeatMillis():
		return fmt.Errorf("%w: the helper raised a session bound", ErrViolation)
	case r.GetBodies() && !h.GetBodies():
		return fmt.Errorf("%w: the helper offered bodies it was not asked for", ErrViolation)
	}
	if err := checkSession(r); err != nil {
		return fmt.Errorf("%w: %v", ErrViolation, err)
	}
	return nil
}

func checkSession(r *helperv1.SessionReady) error {
	hb := time.Duration(r.GetHeartbeatMillis()) * time.Millisecond
	switch {
	case r.GetMaxInFlight() < 1:
		return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "session: max_in_flight must be at least 1")
	case r.GetChunkBytes() < MinChunkBytes:
		return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "session: chunk_bytes below %d", MinChunkBytes)
	case hb < MinSessionHeartbeat || hb > MaxSessionHeartbeat:
		return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "session: heartbeat outside [%s, %s]", MinSessionHeartbeat, MaxSessionHeartbeat)
	}
	return nil
}

// Marshal is the deterministic encoding both ends frame and chunk.
func Marshal(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// Encoded is one frame's payload in two parts, Head then Body: a chunk frame's Body is a
// slice of the message it cuts, so chunking copies nothing.
type Encoded struct{ Head, Body []byte }

// Whole is a frame encoded in one piece.
func Whole(payload []byte) Encoded { return Encoded{Head: payload} }

// Len is the payload's length.
func (e Encoded) Len() int { return len(e.Head) + len(e.Body) }

// The fields chunks travel in: SessionFrame.request_chunk and Frame.response_chunk for the
// pieces of a message, SessionFrame.body and Frame.body for the pieces of a body.
var (
	requestChunkField  = (&helperv1.SessionFrame{}).ProtoReflect().Descriptor().Fields().ByName("request_chunk").Number()
	responseChunkField = (&helperv1.Frame{}).ProtoReflect().Descriptor().Fields().ByName("response_chunk").Number()
	requestBodyField   = (&helperv1.SessionFrame{}).ProtoReflect().Descriptor().Fields().ByName("body").Number()
	responseBodyField  = (&helperv1.Frame{}).ProtoReflect().Descriptor().Fields().ByName("body").Number()
)

// RequestChunks cuts an encoded Request into SessionFrame request_chunk frames of at most
// chunk bytes of it each, the last one marked.
func RequestChunks(id string, payload []byte, chunk int) []Encoded {
	return chunks(requestChunkField, id, payload, chunk)
}

// ResponseChunks cuts an encoded Response into Frame response_chunk frames.
func ResponseChunks(id string, payload []byte, chunk int) []Encoded {
	return chunks(responseChunkField, id, payload, chunk)
}

// RequestBody cuts a piece of a write's content into SessionFrame body frames of at most
// chunk bytes; the last of them is marked when the piece ends the body (an empty last
// piece is one empty marked frame).
func RequestBody(id string, piece []byte, chunk int, last bool) []Encoded {
	return cut(requestBodyField, id, piece, chunk, last)
}

// ResponseBody cuts a read's whole content into Frame body frames, the last marked.
func ResponseBody(id string, content []byte, chunk int) []Encoded {
	return cut(responseBodyField, id, content, chunk, true)
}

func chunks(field protowire.Number, id string, payload []byte, chunk int) []Encoded {
	return cut(field, id, payload, chunk, true)
}

// cut encodes each piece as the frame field {request_id, last, data} by hand — data last,
// so that it is the Body, shared with payload. (Fields may come in any order on the wire;
// the decoder is the generated one.) The last piece is marked when end is set.
func cut(field protowire.Number, id string, payload []byte, chunk int, end bool) []Encoded {
	var out []Encoded
	for {
		data := payload[:min(chunk, len(payload))]
		payload = payload[len(data):]
		last := end && len(payload) == 0
		var inner []byte
		inner = protowire.AppendTag(inner, chunkIDField, protowire.BytesType)
		inner = protowire.AppendString(inner, id)
		if last {
			inner = protowire.AppendTag(inner, chunkLastField, protowire.VarintType)
			inner = protowire.AppendVarint(inner, 1)
		}
		inner = protowire.AppendTag(inner, chunkDataField, protowire.BytesType)
		inner = protowire.AppendVarint(inner, uint64(len(data)))
		head := protowire.AppendTag(nil, field, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(inner)+len(data)))
		out = append(out, Encoded{Head: append(head, inner...), Body: data})
		if len(payload) == 0 {
			return out
		}
	}
}

// Piece is a chunk frame read by the fast path: a piece of a chunked message, or of a body.
type Piece struct {
	*helperv1.Chunk
	Body bool
	buf  *[]byte
}

// Release gives the piece's buffer back for the next frame: call it once nothing refers to
// its data any more, or never (the buffer is then collected). Only body pieces read by
// ReadRequestFrame have one.
func (p *Piece) Release() {
	if p.buf != nil {
		payloads.Put(p.buf)
		p.buf = nil
	}
}

// ReadRequestFrame reads one frame of a session's gateway → helper stream into msg; a
// request chunk or body piece, the bulk of a large transfer, comes back instead as a Piece
// whose data shares the frame's buffer (msg is then untouched).
func ReadRequestFrame(r io.Reader, msg *helperv1.SessionFrame, max int) (*Piece, error) {
	return readChunkOr(r, msg, requestChunkField, requestBodyField, max, true)
}

// ReadResponseFrame is ReadRequestFrame for the helper → gateway stream (its pieces have
// no buffer to give back).
func ReadResponseFrame(r io.Reader, msg *helperv1.Frame, max int) (*Piece, error) {
	return readChunkOr(r, msg, responseChunkField, responseBodyField, max, false)
}

func readChunkOr(r io.Reader, msg proto.Message, chunkField, bodyField protowire.Number, max int, pooled bool) (*Piece, error) {
	payload, buf, err := readPooled(r, max, pooled)
	if err != nil {
		return nil, err
	}
	if c, ok := parseChunk(payload, chunkField); ok {
		return &Piece{Chunk: c}, nil // kept by an assembly: its buffer is not recycled
	}
	if c, ok := parseChunk(payload, bodyField); ok {
		return &Piece{Chunk: c, Body: true, buf: buf}, nil
	}
	err = DecodeFrame(payload, msg) // the decoder copies what it keeps
	if buf != nil {
		payloads.Put(buf)
	}
	return nil, err
}

// parseChunk reads payload as a frame holding exactly one chunk in field, each of the
// chunk's fields at most once with its own wire type and nothing else, without copying the
// data. Anything else — which may still be valid — reports false, for the generated strict
// decoder to judge: this path only makes the common shape cheaper, it accepts nothing the
// decoder would refuse (FuzzChunkFastPath).
func parseChunk(payload []byte, field protowire.Number) (*helperv1.Chunk, bool) {
	num, typ, n := protowire.ConsumeTag(payload)
	if n < 0 || num != field || typ != protowire.BytesType {
		return nil, false
	}
	inner, m := protowire.ConsumeBytes(payload[n:])
	if m < 0 || n+m != len(payload) {
		return nil, false
	}
	c := &helperv1.Chunk{}
	var seen [4]bool
	for len(inner) > 0 {
		num, typ, n := protowire.ConsumeTag(inner)
		if n < 0 || num < 1 || num > 3 || seen[num] {
			return nil, false
		}
		seen[num] = true
		inner = inner[n:]
		switch {
		case num == chunkIDField && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(inner)
			if m < 0 || !utf8.Valid(v) {
				return nil, false
			}
			c.RequestId, inner = string(v), inner[m:]
		case num == chunkDataField && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(inner)
			if m < 0 {
				return nil, false
			}
			c.Data, inner = v, inner[m:]
		case num == chunkLastField && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(inner)
			if m < 0 {
				return nil, false
			}
			c.Last, inner = protowire.DecodeBool(v), inner[m:]
		default:
			return nil, false
		}
	}
	return c, true
}

// The fields of a Chunk.
var (
	chunkFields    = (&helperv1.Chunk{}).ProtoReflect().Descriptor().Fields()
	chunkIDField   = chunkFields.ByName("request_id").Number()
	chunkDataField = chunkFields.ByName("data").Number()
	chunkLastField = chunkFields.ByName("last").Number()
)

// Assembly collects the chunks of one message under a cap on its total size. The pieces are
// kept as they came and joined once, at Decode, into a buffer of the exact size: a 5 MiB
// message is not copied again on every growth.
type Assembly struct {
	limit  int
	size   int
	pieces [][]byte
}

// NewAssembly returns an empty assembly of at most limit bytes.
func NewAssembly(limit int) *Assembly { return &Assembly{limit: limit} }

// Add keeps a chunk's data (the caller gives it up); it refuses to grow past the limit, so
// the memory stays bounded whatever the peer sends.
func (a *Assembly) Add(data []byte) error {
	if len(data) > a.limit-a.size {
		return fmt.Errorf("%w: chunks exceed %d bytes", ErrFrameTooLarge, a.limit)
	}
	a.pieces = append(a.pieces, data)
	a.size += len(data)
	return nil
}

// Decode strictly decodes the assembled message into msg.
func (a *Assembly) Decode(msg proto.Message) error {
	whole := make([]byte, 0, a.size)
	for _, p := range a.pieces {
		whole = append(whole, p...)
	}
	a.pieces = nil
	return DecodeFrame(whole, msg)
}

// Len is how many bytes are assembled.
func (a *Assembly) Len() int { return a.size }
