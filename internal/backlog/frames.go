package backlog

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HTTP/2 frame layout (RFC 9113 §4.1, §6).
const (
	frameHeaderLen = 9
	// clientPrefaceLen is the length of "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", which a client
	// sends before its first frame.
	clientPrefaceLen = 24

	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	// maxHeaderBlock bounds a header block the scanner assembles: the gateway's own response
	// headers and trailers are a few hundred bytes (it cuts a status message at 4 KiB), so a
	// larger block means the accounting lost its way.
	maxHeaderBlock = 64 << 10
)

// errFraming: a frame the scanner cannot follow; the connection is closed.
var errFraming = errors.New("backlog: cannot follow the connection's frames")

// frameEvents receives what a scanner sees, in order.
type frameEvents interface {
	// data: n payload bytes of a DATA frame of stream sid went by.
	data(sid uint32, n int)
	// headers: a complete header block of stream sid.
	headers(sid uint32, block []byte) error
	// ended: stream sid's sender ended it (END_STREAM).
	ended(sid uint32)
	// reset: stream sid was reset (RST_STREAM).
	reset(sid uint32)
}

// scanner follows the HTTP/2 frames of one direction of a connection from bytes fed to it
// in any pieces: it keeps only the current frame's header, the payload still to come and,
// for header blocks, their fragments.
type scanner struct {
	preface int // bytes of the client preface still to skip
	ev      frameEvents
	blocks  bool // assemble header blocks for ev.headers

	hdr   [frameHeaderLen]byte
	nhdr  int
	left  int // payload bytes of the current frame still to come
	typ   byte
	flags byte
	sid   uint32

	fragment []byte // the current HEADERS or CONTINUATION frame's payload
	block    []byte // a header block awaiting END_HEADERS
	blockSID uint32
	blockEnd bool // the block's HEADERS frame carried END_STREAM
	inBlock  bool
}

// feed scans p. After an error the scanner is unusable.
func (s *scanner) feed(p []byte) error {
	for len(p) > 0 {
		if s.preface > 0 {
			n := min(s.preface, len(p))
			s.preface -= n
			p = p[n:]
			continue
		}
		if s.nhdr < frameHeaderLen {
			n := copy(s.hdr[s.nhdr:], p)
			s.nhdr += n
			p = p[n:]
			if s.nhdr < frameHeaderLen {
				return nil
			}
			if err := s.begin(); err != nil {
				return err
			}
			if s.left == 0 {
				if err := s.end(); err != nil {
					return err
				}
			}
			continue
		}
		n := min(s.left, len(p))
		switch s.typ {
		case frameData:
			s.ev.data(s.sid, n)
		case frameHeaders, frameContinuation:
			if !s.blocks {
				break
			}
			if len(s.fragment)+n > maxHeaderBlock {
				return fmt.Errorf("%w: a header block over %d bytes", errFraming, maxHeaderBlock)
			}
			s.fragment = append(s.fragment, p[:n]...)
		}
		s.left -= n
		p = p[n:]
		if s.left == 0 {
			if err := s.end(); err != nil {
				return err
			}
		}
	}
	return nil
}

// begin reads the frame header just completed.
func (s *scanner) begin() error {
	s.left = int(uint32(s.hdr[0])<<16 | uint32(s.hdr[1])<<8 | uint32(s.hdr[2]))
	s.typ, s.flags = s.hdr[3], s.hdr[4]
	s.sid = binary.BigEndian.Uint32(s.hdr[5:]) & 0x7fffffff
	if s.inBlock && (s.typ != frameContinuation || s.sid != s.blockSID) {
		return fmt.Errorf("%w: a header block interrupted by a frame of type %d", errFraming, s.typ)
	}
	if !s.inBlock && s.typ == frameContinuation {
		return fmt.Errorf("%w: a CONTINUATION frame outside a header block", errFraming)
	}
	s.fragment = s.fragment[:0]
	return nil
}

// end handles the frame whose payload just completed, and readies the next.
func (s *scanner) end() error {
	s.nhdr = 0
	switch s.typ {
	case frameData:
		if s.flags&flagEndStream != 0 {
			s.ev.ended(s.sid)
		}
	case frameRSTStream:
		s.ev.reset(s.sid)
	case frameHeaders:
		if !s.blocks {
			s.inBlock, s.blockSID = s.flags&flagEndHeaders == 0, s.sid
			if s.flags&flagEndStream != 0 {
				s.ev.ended(s.sid)
			}
			return nil
		}
		frag, err := headerFragment(s.fragment, s.flags)
		if err != nil {
			return err
		}
		s.block = append(s.block[:0], frag...)
		s.blockSID, s.blockEnd, s.inBlock = s.sid, s.flags&flagEndStream != 0, true
		if s.flags&flagEndHeaders != 0 {
			return s.endBlock()
		}
	case frameContinuation:
		if !s.blocks {
			s.inBlock = s.flags&flagEndHeaders == 0
			return nil
		}
		if len(s.block)+len(s.fragment) > maxHeaderBlock {
			return fmt.Errorf("%w: a header block over %d bytes", errFraming, maxHeaderBlock)
		}
		s.block = append(s.block, s.fragment...)
		if s.flags&flagEndHeaders != 0 {
			return s.endBlock()
		}
	}
	return nil
}

func (s *scanner) endBlock() error {
	s.inBlock = false
	if err := s.ev.headers(s.blockSID, s.block); err != nil {
		return err
	}
	if s.blockEnd {
		s.ev.ended(s.blockSID)
	}
	return nil
}

// headerFragment is a HEADERS frame's header block fragment: its payload without padding
// and priority fields.
func headerFragment(payload []byte, flags byte) ([]byte, error) {
	pad := 0
	if flags&flagPadded != 0 {
		if len(payload) < 1 {
			return nil, fmt.Errorf("%w: a padded HEADERS frame without its pad length", errFraming)
		}
		pad, payload = int(payload[0]), payload[1:]
	}
	if flags&flagPriority != 0 {
		if len(payload) < 5 {
			return nil, fmt.Errorf("%w: a HEADERS frame too short for its priority", errFraming)
		}
		payload = payload[5:]
	}
	if pad > len(payload) {
		return nil, fmt.Errorf("%w: HEADERS padding longer than the frame", errFraming)
	}
	return payload[:len(payload)-pad], nil
}
