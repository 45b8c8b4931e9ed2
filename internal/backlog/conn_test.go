package backlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// The tests serve a real gRPC server whose one method answers as many bytes as asked,
// reserved first as the gateway's handlers do; connections are admitted by a Ledger as
// the gateway's credentials do, the identity being one byte the client writes first.

const (
	testBudget = 16 << 20
	answer     = 4 << 20
	// window is the non-reading client's HTTP/2 windows: fixed (no BDP growth), so what it
	// does not read stays on the server.
	window = 64 << 10
)

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

type testAuth struct {
	credentials.CommonAuthInfo
	conn *Conn
}

func (testAuth) AuthType() string { return "test" }

type testCreds struct{ l *Ledger }

func (c testCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	var id [1]byte
	if _, err := io.ReadFull(raw, id[:]); err != nil {
		return nil, nil, err
	}
	conn, err := c.l.Accept(raw, string(id[:]))
	if err != nil {
		raw.Close()
		return nil, nil, err
	}
	return conn, testAuth{conn: conn}, nil
}
func (testCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("server only")
}
func (testCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "test"}
}
func (c testCreds) Clone() credentials.TransportCredentials { return c }
func (testCreds) OverrideServerName(string) error           { return nil }

var requestIDs atomic.Uint64

// fetched counts the answers the test service produced (past their reservation).
var fetched atomic.Int64

// steady is how long the budget's hold is watched: what would pile up without it has had
// time to (an answer is made in microseconds).
const steady = 300 * time.Millisecond

// edge mirrors the gateway's edge: begin, response headers at once, send, done.
func edge(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, _ := peer.FromContext(ctx)
	conn := p.AuthInfo.(testAuth).conn
	id := strconv.FormatUint(requestIDs.Add(1), 10)
	call := conn.Begin(id)
	defer call.Done()
	if err := grpc.SendHeader(ctx, metadata.Pairs(RequestIDHeader, id)); err != nil {
		return nil, err
	}
	resp, err := handler(WithCall(ctx, call), req)
	if err != nil {
		return nil, err
	}
	if err := call.Send(ctx, int64(len(*resp.(*[]byte))+5)); err != nil {
		return nil, err
	}
	return resp, nil
}

var testService = grpc.ServiceDesc{
	ServiceName: "backlog.Test",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		var in []byte
		if err := dec(&in); err != nil {
			return nil, err
		}
		get := func(ctx context.Context, _ any) (any, error) {
			n := int(binary.BigEndian.Uint32(in))
			if err := Reserve(ctx, int64(n+5)); err != nil { // what Send counts: gRPC's prefix too
				return nil, err
			}
			fetched.Add(1)
			out := make([]byte, n)
			return &out, nil
		}
		return icpt(ctx, &in, &grpc.UnaryServerInfo{FullMethod: "/backlog.Test/Get"}, get)
	}}},
}

func serve(t *testing.T, cfg Config) (*Ledger, string) {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(testCreds{l}), grpc.ForceServerCodec(rawCodec{}), grpc.UnaryInterceptor(edge),
		grpc.MaxSendMsgSize(64<<20))
	s.RegisterService(&testService, struct{}{})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return l, lis.Addr().String()
}

// dial connects as client id; a non-reader keeps fixed, small windows.
func dial(t *testing.T, addr string, id byte, reader bool) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecureWith(id)),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(64<<20)),
	}
	if !reader {
		opts = append(opts, grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// insecureWith is client credentials that write the identity byte and nothing else.
type insecureWith byte

func (c insecureWith) ClientHandshake(_ context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, err := raw.Write([]byte{byte(c)}); err != nil {
		return nil, nil, err
	}
	return raw, testAuth{}, nil
}
func (insecureWith) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("client only")
}
func (insecureWith) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "test"}
}
func (c insecureWith) Clone() credentials.TransportCredentials { return c }
func (insecureWith) OverrideServerName(string) error           { return nil }

func request(n int) *[]byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(n))
	return &b
}

// get asks for n bytes and reads the answer.
func get(ctx context.Context, cc *grpc.ClientConn, n int) error {
	var out []byte
	if err := cc.Invoke(ctx, "/backlog.Test/Get", request(n), &out); err != nil {
		return err
	}
	if len(out) != n {
		return fmt.Errorf("%d bytes, want %d", len(out), n)
	}
	return nil
}

// ask asks for n bytes and does not read the answer until the returned stream is read.
func ask(ctx context.Context, t *testing.T, cc *grpc.ClientConn, n int) grpc.ClientStream {
	t.Helper()
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{}, "/backlog.Test/Get")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(request(n)); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return s
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A client that asks and does not read holds its budget, no more: its further calls wait
// (having fetched nothing), another client is answered at once, and when it reads, every
// call completes and the ledger returns to nothing.
func TestUnreadAnswersStayWithinTheClientsBudget(t *testing.T) {
	l, addr := serve(t, Config{ClientBytes: testBudget, ClientConns: 4})
	slow, fast := dial(t, addr, 'a', false), dial(t, addr, 'b', true)
	fetched.Store(0)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const asked = 12 // 48 MiB of answers, three times the budget
	var unread []grpc.ClientStream
	for range asked {
		unread = append(unread, ask(ctx, t, slow, answer))
	}
	eventually(t, "calls wait for the budget", func() bool { return l.Stats().Waits > 0 })
	// For a while, the answers fetched stay what the budget holds — counted by the
	// handlers themselves, not by the ledger.
	for end := time.Now().Add(steady); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if n := fetched.Load(); n > testBudget/answer {
			t.Fatalf("%d answers of %d bytes fetched for a client that reads none, over its budget of %d", n, answer, testBudget)
		}
		if s := l.Stats(); s.MaxClientBytes > testBudget {
			t.Fatalf("the non-reading client holds %d bytes, over its budget of %d", s.MaxClientBytes, testBudget)
		}
	}
	start := time.Now()
	if err := get(ctx, fast, answer); err != nil {
		t.Fatalf("another client: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("another client waited %s", d)
	}
	// It reads them all, each as it comes (in the order asked, it could wait on an answer
	// the server has not fetched because the others hold the budget: docs/operations.md).
	errs := make(chan error, len(unread))
	for i, s := range unread {
		go func() {
			var out []byte
			if err := s.RecvMsg(&out); err != nil || len(out) != answer {
				errs <- fmt.Errorf("call %d: %d bytes, %v", i, len(out), err)
				return
			}
			errs <- nil
		}()
	}
	for range unread {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the ledger holds nothing", func() bool { s := l.Stats(); return s.Bytes == 0 })
}

// Answers gRPC drops — calls the client cancels while their answers wait to be written —
// are freed when the client's reset is read, not kept until the connection closes.
func TestResetStreamsFreeTheirAnswers(t *testing.T) {
	l, addr := serve(t, Config{ClientBytes: testBudget, ClientConns: 4})
	cc := dial(t, addr, 'a', false)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range 3 {
		callCtx, cancelCall := context.WithCancel(ctx)
		ask(callCtx, t, cc, answer)
		eventually(t, "the answer is queued", func() bool { return l.Stats().Bytes >= answer-window })
		cancelCall()
		eventually(t, "the reset frees the answer", func() bool { return l.Stats().Bytes == 0 })
	}
	if err := get(ctx, dial(t, addr, 'a', true), 1<<20); err != nil {
		t.Fatal(err)
	}
}

// A closed connection frees everything; its client's entry goes.
func TestClosingFreesEverything(t *testing.T) {
	l, addr := serve(t, Config{ClientBytes: testBudget, ClientConns: 4})
	cc := dial(t, addr, 'a', false)
	for range 3 {
		ask(t.Context(), t, cc, answer)
	}
	eventually(t, "answers are queued", func() bool { return l.Stats().Bytes > 0 })
	cc.Close()
	eventually(t, "the ledger forgets the client", func() bool { s := l.Stats(); return s.Bytes == 0 && s.Clients == 0 })
}

// A client at its connection cap is refused at the handshake; others are not.
func TestConnectionCap(t *testing.T) {
	l, addr := serve(t, Config{ClientBytes: testBudget, ClientConns: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := get(ctx, dial(t, addr, 'a', true), 10); err != nil {
		t.Fatal(err)
	}
	second, cancelSecond := context.WithTimeout(ctx, 2*time.Second)
	defer cancelSecond()
	if err := get(second, dial(t, addr, 'a', true), 10); err == nil {
		t.Fatal("a second connection of a client capped at one was served")
	}
	if s := l.Stats(); s.RefusedConns == 0 || s.Conns != 1 {
		t.Errorf("stats %+v: want refusals and one connection", s)
	}
	if err := get(ctx, dial(t, addr, 'b', true), 10); err != nil {
		t.Fatalf("another client: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{ClientBytes: 1 << 20, ClientConns: 0}).Validate(); err == nil {
		t.Fatal("accepted a 1 MiB budget and no connections")
	}
	if err := (Config{ClientBytes: DefaultClientBytes, ClientConns: DefaultClientConns}).Validate(); err != nil {
		t.Fatal(err)
	}
}
