package clustertest

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// OldHelperPath is a stand-in for a helper of before sessions: it refuses --session as an
// unknown flag (exit 2, before reading anything) and serves one request per exec as the
// real helper does.
const OldHelperPath = "/execplane/old-helper"

// hostileHeartbeatMillis is the session heartbeat the hostile session helpers agree to: a
// silent one is found out within a few tenths of a second.
const hostileHeartbeatMillis = 100

// muteHeartbeatMillis is the mute helper's: it beats every 50 ms, twenty times an interval,
// so only a stall of three seconds reads as silence — not a loaded machine's pause of a few
// tenths between a beat and the gateway — and it is closed as stuck, as its name says.
const muteHeartbeatMillis = 1000

// HostileSessions are hostile helpers in session mode, by name (HostileDir + name): each
// answers the gateway's hello with a valid ready, takes some of what follows, then breaks
// the protocol the way its name says. Run without --session they break the per-exec
// protocol too (their first frame is not a response).
var HostileSessions = map[string]string{
	// An answer for a request id never sent.
	"session-unknown-id": readyThen(printFrame(response("zz")) + "; cat >/dev/null"),
	// The first request answered twice.
	"session-duplicate": readyThen(printFrame(response("1")) + "; " + printFrame(response("1")) + "; cat >/dev/null"),
	// A frame whose payload is not a message.
	"session-garbage": readyThen(`printf '\000\000\000\005\377\377\377\377\377'; cat >/dev/null`),
	// A length prefix of 4 GiB.
	"session-oversize": readyThen(`printf '\377\377\377\377'; cat >/dev/null`),
	// Chunks for the first request past any read's cap: 64 pieces of 64 KiB, never a last.
	"session-huge-answer": readyThen("i=0; while [ $i -lt 64 ]; do " + printChunkHeader("1", 64<<10) + "; head -c 65536 /dev/zero; i=$((i+1)); done; cat >/dev/null"),
	// Never answers and never beats: silent.
	"session-silent": readyThen("exec sleep 3600"),
	// Beats, but never answers: the caller's deadline, then the session's grace.
	"session-mute": readyEvery(muteHeartbeatMillis, "while :; do "+printFrame(&helperv1.Frame{Frame: &helperv1.Frame_Heartbeat{Heartbeat: &helperv1.Heartbeat{}}})+"; sleep 0.05; done"),
}

// readyThen is a script that answers the hello (it writes the ready first, then takes the
// hello and the start of a request from stdin) and goes on with rest.
func readyThen(rest string) string { return readyEvery(hostileHeartbeatMillis, rest) }

// readyEvery is readyThen with a heartbeat of heartbeatMillis agreed.
func readyEvery(heartbeatMillis uint64, rest string) string {
	ready := &helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: &helperv1.SessionReady{
		Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_2, MaxInFlight: 1,
		ChunkBytes: protocol.MinChunkBytes, HeartbeatMillis: heartbeatMillis,
	}}}
	return printFrame(ready) + "; head -c 40 >/dev/null; " + rest
}

func response(id string) *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: id,
		Outcome: &helperv1.Response_Error{Error: &helperv1.Error{Code: helperv1.ErrorCode_ERROR_CODE_NOT_FOUND}}}}}
}

// printFrame is a printf command writing f as one frame, every byte escaped.
func printFrame(f *helperv1.Frame) string {
	payload, err := protocol.Marshal(f)
	if err != nil {
		panic(err)
	}
	return "printf '" + octal(frameHeader(len(payload))) + octal(payload) + "'"
}

// printChunkHeader is a printf command writing the start of a chunk frame for id whose data
// (n bytes, written by the caller) follows.
func printChunkHeader(id string, n int) string {
	whole, err := protocol.Marshal(&helperv1.Frame{Frame: &helperv1.Frame_ResponseChunk{ResponseChunk: &helperv1.Chunk{RequestId: id, Data: make([]byte, n)}}})
	if err != nil {
		panic(err)
	}
	head := whole[:len(whole)-n] // the encoding ends with the data
	return "printf '" + octal(frameHeader(len(whole))) + octal(head) + "'"
}

func frameHeader(n int) []byte {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(n))
	return h[:]
}

func octal(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, `\%03o`, c)
	}
	return s.String()
}

// oldHelper is OldHelperPath's script, delegating to the helper binary at helper.
func oldHelper(helper string) string {
	return `for a in "$@"; do [ "$a" = --session ] && { echo "flag provided but not defined: -session" >&2; exit 2; }; done
exec '` + helper + `' "$@"`
}
