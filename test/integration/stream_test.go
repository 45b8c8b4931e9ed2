package integration_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// streamFiles walks WriteFileStream and ReadFileStream on a ready session whose profile
// allows 1 MiB files: content written in pieces reads back whole, in pieces; every refusal
// — over the limit, a create-only write on an existing file, content short of or past the
// size announced, a caller gone midway — changes nothing and leaves no temporary file.
func streamFiles(t *testing.T, s *session) {
	ctx := callCtx(t)
	content := make([]byte, 900<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	info, err := s.writeStream(ctx, "streamed/big.bin", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, uint64(len(content)), content, 100<<10)
	if err != nil || info.GetInfo().GetSize() != uint64(len(content)) || info.GetInfo().GetVersion() == "" {
		t.Fatalf("streamed write: %v %v", info, err)
	}
	got, res, pieces, err := s.readStream(ctx, "streamed/big.bin")
	if err != nil || !bytes.Equal(got, content) || res.GetInfo().GetVersion() != info.GetInfo().GetVersion() || res.GetMore() {
		t.Fatalf("streamed read: %d bytes, %v, %v", len(got), res, err)
	}
	t.Logf("read back %d bytes in %d messages", len(got), pieces)

	// A unary Files write larger than a session chunk travels as a body too: the same
	// content, the same refusals.
	unary := &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte("streamed/unary.bin"), Content: content, Mode: executionv1.WriteMode_WRITE_MODE_CREATE_ONLY}}}
	if r, err := s.files(ctx, unary); err != nil || r.GetWrite().GetInfo().GetSize() != uint64(len(content)) {
		t.Fatalf("a large Files write: %v %v", r, err)
	}
	_, err = s.files(ctx, unary)
	wantCode(t, "a large create-only Files write on an existing file", err, codes.AlreadyExists, "ALREADY_EXISTS")
	if r, err := s.files(ctx, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("streamed/unary.bin")}}}); err != nil ||
		!bytes.Equal(r.GetRead().GetContent(), content) {
		t.Fatalf("reading the large Files write back: %v", err)
	}
	if _, err := s.files(ctx, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Remove{Remove: &executionv1.RemovePath{Path: []byte("streamed/unary.bin")}}}); err != nil {
		t.Fatal(err)
	}

	_, err = s.writeStream(ctx, "streamed/huge.bin", executionv1.WriteMode_WRITE_MODE_OVERWRITE, 1<<20+1, nil, 0)
	wantCode(t, "a streamed write over max_file_bytes", err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	_, err = s.writeStream(ctx, "streamed/big.bin", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, 4, []byte("nope"), 4)
	wantCode(t, "a create-only streamed write on an existing file", err, codes.AlreadyExists, "ALREADY_EXISTS")
	_, err = s.writeStream(ctx, "streamed/short.bin", executionv1.WriteMode_WRITE_MODE_OVERWRITE, 1000, content[:999], 333)
	wantCode(t, "content short of its size", err, codes.InvalidArgument, "INVALID_ARGUMENT")
	_, err = s.writeStream(ctx, "streamed/long.bin", executionv1.WriteMode_WRITE_MODE_OVERWRITE, 1000, content[:1001], 500)
	wantCode(t, "content past its size", err, codes.InvalidArgument, "INVALID_ARGUMENT")

	// A caller gone midway: half the content sent, then the call cancelled.
	cctx, cancel := context.WithCancel(ctx)
	st, err := s.api.WriteFileStream(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&executionv1.WriteFileStreamRequest{RunGrant: s.runG, Environment: s.envRef, Size: uint64(len(content)),
		Write: &executionv1.WriteFile{Path: []byte("streamed/gone/away.bin"), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE, CreateParents: true}, Content: content[:400<<10]}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := st.CloseAndRecv(); err == nil {
		t.Fatal("a cancelled streamed write succeeded")
	}

	// Nothing of the refused writes is left: the original intact, no other file, no
	// temporary file, no parent the cancelled write created.
	clustertest.Eventually(t, 10*time.Second, "the cancelled write's temporary file and parents removed", func() bool {
		r, err := s.files(ctx, &executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: []byte("streamed")}}})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		var names []string
		for _, e := range r.GetList().GetEntries() {
			names = append(names, string(e.GetPath()))
		}
		return strings.Join(names, ",") == "big.bin"
	})
	got, _, _, err = s.readStream(ctx, "streamed/big.bin")
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the file after the refusals: %d bytes, %v", len(got), err)
	}
	if _, err := s.files(ctx, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Remove{Remove: &executionv1.RemovePath{Path: []byte("streamed"), Recursive: true}}}); err != nil {
		t.Fatal(err)
	}
}

// writeStream sends a streamed write of size bytes announced, content in pieces of piece
// bytes (the first with the write).
func (s *session) writeStream(ctx context.Context, path string, mode executionv1.WriteMode, size uint64, content []byte, piece int) (*executionv1.WriteFileResult, error) {
	st, err := s.api.WriteFileStream(ctx)
	if err != nil {
		return nil, err
	}
	msg := &executionv1.WriteFileStreamRequest{RunGrant: s.runG, Environment: s.envRef, Size: size,
		Write: &executionv1.WriteFile{Path: []byte(path), Mode: mode, CreateParents: true}}
	for first := true; first || len(content) > 0; first = false {
		n := min(piece, len(content))
		msg.Content, content = content[:n], content[n:]
		if err := st.Send(msg); err != nil {
			break // the gateway answered: CloseAndRecv says how
		}
		msg = &executionv1.WriteFileStreamRequest{}
	}
	resp, err := st.CloseAndRecv()
	return resp.GetResult(), err
}

// readStream reads a file through ReadFileStream: the content, the result and the number
// of messages the content came in.
func (s *session) readStream(ctx context.Context, path string) ([]byte, *executionv1.ReadFileResult, int, error) {
	st, err := s.api.ReadFileStream(ctx, &executionv1.ReadFileStreamRequest{RunGrant: s.runG, Environment: s.envRef, Read: &executionv1.ReadFile{Path: []byte(path)}})
	if err != nil {
		return nil, nil, 0, err
	}
	var content []byte
	for n := 0; ; n++ {
		m, err := st.Recv()
		switch {
		case errors.Is(err, io.EOF):
			return nil, nil, n, errors.New("the stream ended without a result")
		case err != nil:
			return nil, nil, n, err
		case m.GetResult() != nil:
			if len(m.GetContent()) > 0 {
				return nil, nil, n, errors.New("the result message carries content")
			}
			return content, m.GetResult(), n, nil
		}
		content = append(content, m.GetContent()...)
	}
}
