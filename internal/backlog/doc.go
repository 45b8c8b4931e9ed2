// Package backlog bounds what one client's unread answers can hold in a gateway.
//
// A gRPC server hands a finished answer to its transport and forgets it: grpc-go keeps the
// encoded bytes queued until the client's HTTP/2 flow-control window lets them out, with no
// hook telling the server when they left. A client that asks and never reads can so pile
// up answers of many MiB each for as long as its calls' deadlines allow. This package counts
// them where they really leave: it wraps each authenticated connection and reads the HTTP/2
// frames the server writes to it (and the stream resets the client sends).
//
// Invariants:
//
//   - A client identity's budget (Config.ClientBytes) covers two things: bytes reserved by
//     calls fetching an answer that arrives at once (Call.Reserve before the executor is
//     asked, Call.Settle when the answer is in hand — a reservation lasts a fetch, never a
//     whole call) and bytes of answers handed to gRPC and not yet written to the socket
//     (Call.Send). A call waits for room first come, first served, for maxWait at most and
//     behind maxWaiters at most, then is refused (ErrFull, retryable): a client that does
//     not read holds neither memory nor, for long, the replica's call slots. Answers that
//     arrive late (a command's, when it ends) are counted as they arrive, after their call
//     waited for room.
//   - An answer is attributed to its HTTP/2 stream by the request id the gateway sends in
//     the call's response headers, sent before the handler runs: the connection decodes the
//     HPACK header blocks it writes and binds the stream to the call. A call's bytes count
//     until DATA frames of that stream carry them out, or the stream ends (trailers or a
//     reset, either side), or the connection closes — never by a guess or a timer.
//   - A call sends nothing before its stream is bound: Send waits for the binding, so no
//     byte is ever counted against a stream the accounting cannot see end.
//   - A connection the accounting cannot follow (a malformed header block, a block over
//     maxHeaderBlock) is closed: failing closed frees everything it held.
//   - Config.ClientConns bounds one identity's open connections: each carries streams and
//     buffers of its own, so without it the bound above would be per connection.
package backlog
