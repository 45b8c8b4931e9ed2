package podexec

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/internal/session"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// pieces yields content in pieces of n bytes, then io.EOF; pulled counts the pieces taken.
func pieces(content []byte, n int, pulled *int) func() ([]byte, error) {
	return func() ([]byte, error) {
		if len(content) == 0 {
			return nil, io.EOF
		}
		p := content[:min(n, len(content))]
		content = content[len(p):]
		*pulled++
		return p, nil
	}
}

func bodyWrite(path string, mode executionv1.WriteMode, size int) *helperv1.Request {
	r := poolWrite(path, "")
	r.Limits.MaxFileBytes = 8 << 20
	w := r.GetFile().GetWrite()
	w.Mode, w.CreateParents = mode, true
	r.BodyBytes = uint64(size)
	return r
}

func bodyRead(path string) *helperv1.Request {
	r := poolRead(path)
	r.Limits.MaxFileBytes = 8 << 20
	r.BodyResponse = true
	return r
}

func random(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// entries lists the workspace, the helper's temporary files included.
func entries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if p == root {
			return err
		}
		if errors.Is(err, fs.ErrNotExist) { // removed while walked: the helper is tidying beside us
			return nil
		}
		if err == nil {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A write's content goes as a body, in pieces, and a read's comes back as one: what was
// written reads back whole, over one session, and the read's response carries no content
// of its own.
func TestStreamWritesAndReadsContentAsBodies(t *testing.T) {
	root := workspaceWith(t, nil)
	o := &opener{root: root}
	v := newPoolView()
	p := pool(t, PoolConfig{}, o, v)
	content := random(t, 3<<20+17)
	var pulled int
	resp, err := p.Stream(context.Background(), v.target(), bodyWrite("d/big", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, len(content)), 1<<20,
		session.Transfer{Upload: pieces(content, 100<<10, &pulled)})
	if err != nil || resp.GetError() != nil {
		t.Fatalf("write: %v %v", resp, err)
	}
	if got := resp.GetFile().GetWrite().GetInfo().GetSize(); got != uint64(len(content)) {
		t.Fatalf("the write reports %d bytes", got)
	}
	var got bytes.Buffer
	var downloads int
	resp, err = p.Stream(context.Background(), v.target(), bodyRead("d/big"), protocol.MaxFileBytesCeiling,
		session.Transfer{Download: func(b []byte) error { downloads++; got.Write(b); return nil }})
	if err != nil || resp.GetError() != nil {
		t.Fatalf("read: %v %v", resp, err)
	}
	if !bytes.Equal(got.Bytes(), content) || len(resp.GetFile().GetRead().GetContent()) != 0 || resp.GetFile().GetRead().GetMore() {
		t.Fatalf("read back %d bytes in %d pieces (response content %d)", got.Len(), downloads, len(resp.GetFile().GetRead().GetContent()))
	}
	if downloads < 2 {
		t.Fatalf("the content came in %d piece(s), not as it arrived", downloads)
	}
	if opens, perExec := o.counts(); opens != 1 || perExec != 0 {
		t.Fatalf("opens %d, single execs %d", opens, perExec)
	}
}

// A write the helper refuses at once is answered before its body is whole: the rest is
// not sent, the session stays good for the next call, and nothing changed.
func TestStreamRefusedWriteStopsItsBody(t *testing.T) {
	root := workspaceWith(t, map[string]string{"taken": "old"})
	o := &opener{root: root}
	v := newPoolView()
	p := pool(t, PoolConfig{}, o, v)
	content := random(t, 6<<20)
	var pulled int
	blocked := make(chan struct{})
	upload := pieces(content, 64<<10, &pulled)
	resp, err := p.Stream(context.Background(), v.target(), bodyWrite("taken", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, len(content)), 1<<20,
		session.Transfer{Upload: func() ([]byte, error) {
			if pulled == 4 { // the caller's next piece has not come yet
				<-blocked
				return nil, errors.New("the caller is gone")
			}
			return upload()
		}})
	close(blocked)
	if err != nil || resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS {
		t.Fatalf("want ALREADY_EXISTS, got %v %v", resp, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "taken")); string(b) != "old" {
		t.Fatalf("the file changed: %q", b)
	}
	if e := entries(t, root); len(e) != 1 {
		t.Fatalf("the workspace holds %v", e)
	}
	for range 3 { // the slot was given back and the helper took the Cancel
		if resp, err := p.Execute(context.Background(), v.target(), poolRead("taken"), 1<<20); err != nil || string(resp.GetFile().GetRead().GetContent()) != "old" {
			t.Fatalf("the next call: %v %v", resp, err)
		}
	}
	if opens, _ := o.counts(); opens != 1 {
		t.Fatalf("the session was replaced: %d opens", opens)
	}
}

// A body that ends short — the caller went away, or sent less than it announced — writes
// nothing and leaves nothing, not even the parents the write created, and the session
// stays good.
func TestStreamBodyEndingShortWritesNothing(t *testing.T) {
	for name, c := range map[string]struct {
		upload func(content []byte) func() ([]byte, error)
		want   func(error) bool
	}{
		"the caller is gone": {
			upload: func(content []byte) func() ([]byte, error) {
				n := 0
				return func() ([]byte, error) {
					if n++; n > 5 {
						return nil, errors.New("the caller is gone")
					}
					return content[(n-1)<<16 : n<<16], nil
				}
			},
			want: func(err error) bool { return err != nil && strings.Contains(err.Error(), "the caller is gone") },
		},
		"less than announced": {
			upload: func(content []byte) func() ([]byte, error) {
				var n int
				return pieces(content[:len(content)-1], 1<<16, &n)
			},
			want: func(err error) bool { return errors.Is(err, session.ErrBodySize) },
		},
		"more than announced": {
			upload: func(content []byte) func() ([]byte, error) {
				var n int
				return pieces(append(content, 'x'), 1<<16, &n)
			},
			want: func(err error) bool { return errors.Is(err, session.ErrBodySize) },
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := workspaceWith(t, nil)
			o := &opener{root: root}
			v := newPoolView()
			p := pool(t, PoolConfig{}, o, v)
			content := random(t, 1<<20)
			_, err := p.Stream(context.Background(), v.target(), bodyWrite("new/dir/f", executionv1.WriteMode_WRITE_MODE_OVERWRITE, len(content)), 1<<20,
				session.Transfer{Upload: c.upload(content)})
			if !c.want(err) {
				t.Fatalf("got %v", err)
			}
			// The helper answers the Cancel by removing its temporary file and the parents,
			// beside the next call.
			if _, err := p.Execute(context.Background(), v.target(), poolWrite("other", "x"), 1<<20); err != nil {
				t.Fatal(err)
			}
			clustertest.Eventually(t, 5*time.Second, "only the next call's file left", func() bool {
				e := entries(t, root)
				return len(e) == 1 && e[0] == "other"
			})
			if opens, _ := o.counts(); opens != 1 {
				t.Fatalf("the session was replaced: %d opens", opens)
			}
		})
	}
}

// Whole carries a call with a body as one request for an executor without bodies.
func TestWholeGathersAndHandsOverContent(t *testing.T) {
	content := random(t, 300<<10)
	var sent *helperv1.Request
	execute := func(_ context.Context, _ Target, req *helperv1.Request, _ int) (*helperv1.Response, error) {
		sent = req
		return &helperv1.Response{Outcome: &helperv1.Response_File{File: &executionv1.FileResult{Result: &executionv1.FileResult_Read{Read: &executionv1.ReadFileResult{Content: content}}}}}, nil
	}
	var n int
	if _, err := Whole(context.Background(), execute, Target{}, bodyWrite("f", executionv1.WriteMode_WRITE_MODE_OVERWRITE, len(content)), 1<<20,
		session.Transfer{Upload: pieces(content, 7000, &n)}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sent.GetFile().GetWrite().GetContent(), content) || sent.GetBodyBytes() != 0 {
		t.Fatalf("the whole request carries %d bytes, body_bytes %d", len(sent.GetFile().GetWrite().GetContent()), sent.GetBodyBytes())
	}
	if _, err := Whole(context.Background(), execute, Target{}, bodyWrite("f", executionv1.WriteMode_WRITE_MODE_OVERWRITE, len(content)+1), 1<<20,
		session.Transfer{Upload: pieces(content, 7000, &n)}); !errors.Is(err, session.ErrBodySize) {
		t.Fatalf("a short body: %v", err)
	}
	var got []byte
	resp, err := Whole(context.Background(), execute, Target{}, bodyRead("f"), 1<<20, session.Transfer{Download: func(b []byte) error { got = append(got, b...); return nil }})
	if err != nil || !bytes.Equal(got, content) || len(resp.GetFile().GetRead().GetContent()) != 0 || sent.GetBodyResponse() {
		t.Fatalf("the read: %d bytes handed over, %d left in the response, %v", len(got), len(resp.GetFile().GetRead().GetContent()), err)
	}
}
