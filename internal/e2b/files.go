package e2b

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/client"
)

// Bounds of uploads.
const (
	// maxUploadParts bounds the files of one multipart upload.
	maxUploadParts = 1000
	// maxPartHeaderBytes bounds a part's headers (a path and a content type).
	maxPartHeaderBytes = 16 << 10
)

// upload is one file of a POST /files, held so that every file of the request is checked
// (path, size, duplicates) before any is written: in memory up to memorySpool bytes (one
// unary write, as a Go SDK caller's), in a temporary file beyond (a streamed write).
type upload struct {
	rel     string
	content []byte
	buf     *bytes.Buffer // content's, returned to spoolBuffers when done
	file    *os.File
	size    int64
}

// spoolBuffers are the memory spools of uploads, reused: a megabyte allocated per upload is
// most of what the front end adds to a write.
var spoolBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// memorySpool is the largest upload held in memory: the files agents write are mostly
// small, and a unary write of them is the cheapest; larger ones go through the disk so that
// memory stays bounded by requests × memorySpool.
const memorySpool = 4 << 20

func (u upload) discard() {
	if u.buf != nil && u.buf.Cap() <= 2*memorySpool {
		spoolBuffers.Put(u.buf)
	}
	if u.file != nil {
		u.file.Close()
		os.Remove(u.file.Name())
	}
}

// readFile serves GET /files?path=: the file's content, streamed from the workspace with
// its length; 404 for a missing file, 400 for a directory, as envd answers.
func (f *frontEnd) readFile(w http.ResponseWriter, r *http.Request) {
	if err := checkUser(r.URL.Query().Get("username")); err != nil {
		f.fail(w, r, err)
		return
	}
	// One call answers a file up to the profile's maxFileBytes (most of them) with its size;
	// a larger one follows in further calls, each checked against the first's version.
	var (
		run   *client.Run
		rel   string
		first client.Chunk
	)
	err := f.at(r.Context(), r.URL.Query().Get("path"), func(rn *client.Run, p string) error {
		var err error
		run, rel = rn, p
		first, err = run.ReadRange(r.Context(), rel, 0, 0)
		return err
	})
	switch {
	case errors.Is(err, client.ErrNotFound):
		f.fail(w, r, &problem{http.StatusNotFound, 0, fmt.Sprintf("path '%s' does not exist", e2bPath(rel))})
		return
	case errors.Is(err, client.ErrWrongType):
		f.fail(w, r, badRequest("path '%s' is not a regular file (a directory?)", e2bPath(rel)))
		return
	case err != nil:
		f.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", fmt.Sprint(first.Info.Size))
	if _, err := w.Write(first.Content); err != nil {
		return
	}
	for offset, more := uint64(len(first.Content)), first.More; more; {
		next, err := run.ReadRange(r.Context(), rel, offset, 0)
		if err == nil && next.Info.Version != first.Info.Version {
			err = errors.New("the file changed while it was read")
		}
		if err != nil || len(next.Content) == 0 && next.More {
			// The status is sent: cut the connection rather than end a short body
			// cleanly (the length says it is short too).
			f.log.Debug("read cut", logging.KeyError, err)
			panic(http.ErrAbortHandler)
		}
		if _, err := w.Write(next.Content); err != nil {
			return
		}
		offset, more = offset+uint64(len(next.Content)), next.More
	}
}

// writeFiles serves POST /files: a multipart body whose parts' filenames are the paths (the
// path query, when given, names the only file), or an octet-stream body for the path query,
// gzip-encoded or not. Every file is received and checked before the first is written;
// each write is atomic (a file is replaced whole or not at all), the set of them is not.
func (f *frontEnd) writeFiles(w http.ResponseWriter, r *http.Request) {
	if err := checkUser(r.URL.Query().Get("username")); err != nil {
		f.fail(w, r, err)
		return
	}
	cl := callerOf(r.Context())
	limit, err := f.maxFileBytes(r.Context(), cl.sandbox.env.Status().GetProfile())
	if err != nil {
		f.fail(w, r, err)
		return
	}
	uploads, err := f.receive(r, limit)
	defer func() {
		for _, u := range uploads {
			u.discard()
		}
	}()
	if err != nil {
		f.fail(w, r, err)
		return
	}
	type written struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Path string `json:"path"`
	}
	var out []written
	err = f.withRun(r.Context(), func(run *client.Run) error {
		out = out[:0]
		for _, u := range uploads {
			var err error
			if u.file == nil {
				_, err = run.WriteFile(r.Context(), u.rel, u.content, client.CreateParents())
			} else {
				if _, err = u.file.Seek(0, io.SeekStart); err == nil {
					_, err = run.WriteFileFrom(r.Context(), u.rel, u.file, u.size, client.CreateParents())
				}
			}
			if err != nil {
				return err
			}
			p := e2bPath(u.rel)
			out = append(out, written{Name: p[strings.LastIndex(p, "/")+1:], Type: "file", Path: p})
		}
		return nil
	})
	if err != nil {
		f.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// receive spools a POST /files body's files, each within limit bytes.
func (f *frontEnd) receive(r *http.Request, limit int64) ([]upload, error) {
	query := r.URL.Query()
	named := query.Has("path")
	var uploads []upload
	seen := map[string]bool{}
	// A request holds at most memorySpool bytes in memory, whatever its parts; beyond, its
	// files go to the spool folder, at most MaxUploadBytes in all.
	memory, total := int64(memorySpool), int64(0)
	hint := int64(-1)
	if named {
		hint = r.ContentLength // one file: the request's length is about its size
	}
	add := func(p string, body io.Reader) error {
		rel, err := workspacePath(p)
		if err != nil {
			return err
		}
		if seen[rel] {
			return badRequest("path '%s' is given twice", e2bPath(rel))
		}
		seen[rel] = true
		u, err := spool(body, min(limit, f.cfg.MaxUploadBytes-total), hint, memory, f.cfg.SpoolDir)
		if err != nil {
			var p *problem
			if errors.As(err, &p) && p.status == http.StatusRequestEntityTooLarge && total > 0 && f.cfg.MaxUploadBytes-total < limit {
				err = &problem{http.StatusRequestEntityTooLarge, 0, fmt.Sprintf("the upload is larger than %d bytes in all", f.cfg.MaxUploadBytes)}
			}
			return err
		}
		u.rel = rel
		uploads = append(uploads, u)
		total += u.size
		if u.file == nil {
			memory -= u.size
		}
		return nil
	}
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return nil, badRequest("a Content-Type of multipart/form-data or application/octet-stream is required")
	}
	switch mediaType {
	case "application/octet-stream":
		if !named {
			return nil, badRequest("an octet-stream upload needs the path query")
		}
		var body io.Reader = r.Body
		switch enc := r.Header.Get("Content-Encoding"); enc {
		case "", "identity":
		case "gzip":
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				return nil, badRequest("the gzip body is malformed")
			}
			defer gz.Close()
			body = gz
		default:
			return nil, badRequest("Content-Encoding %q is not supported (gzip is)", enc)
		}
		err := add(query.Get("path"), body)
		return uploads, err
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextRawPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return uploads, badRequest("the multipart body is malformed")
			}
			if len(uploads) == maxUploadParts {
				return uploads, badRequest("at most %d files per upload", maxUploadParts)
			}
			p, err := partPath(part)
			if err != nil {
				return uploads, err
			}
			if named {
				if len(uploads) > 0 {
					return uploads, badRequest("the path query names one file; the body has more")
				}
				p = query.Get("path")
			}
			if err := add(p, part); err != nil {
				return uploads, err
			}
		}
		if len(uploads) == 0 {
			return nil, badRequest("the upload has no file")
		}
		return uploads, nil
	}
	return nil, badRequest("a Content-Type of multipart/form-data or application/octet-stream is required")
}

// partPath is a part's filename as sent, with its directories: envd's path for a file of a
// multi-file write (Go's FileName keeps only the base name). Node's FormData escapes only
// the quote, LF and CR in it.
func partPath(part *multipart.Part) (string, error) {
	cd := part.Header.Get("Content-Disposition")
	if len(cd) > maxPartHeaderBytes {
		return "", badRequest("a part's Content-Disposition is too long")
	}
	_, params, err := mime.ParseMediaType(cd)
	if err != nil || params["filename"] == "" {
		return "", badRequest("each part needs a Content-Disposition with the file's path as its filename")
	}
	return strings.NewReplacer("%22", `"`, "%0A", "\n", "%0D", "\r").Replace(params["filename"]), nil
}

// spool reads body into memory, or into a temporary file past memory bytes, refusing more
// than limit bytes. hint is the file's length when known (-1 otherwise): the memory spool is
// sized for it at once.
func spool(body io.Reader, limit, hint, memory int64, dir string) (upload, error) {
	tooLarge := &problem{http.StatusRequestEntityTooLarge, 0, fmt.Sprintf("a file is larger than the sandbox's limit of %d bytes", limit)}
	head := min(limit, max(memory, 0)) + 1
	buf := spoolBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	if hint > 0 {
		buf.Grow(int(min(hint, head)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(io.LimitReader(body, head))
	mem := upload{content: buf.Bytes(), buf: buf, size: int64(buf.Len())}
	if err != nil {
		mem.discard()
		return upload{}, badRequest("the upload broke off: %v", err)
	}
	n := mem.size
	if n > limit {
		mem.discard()
		return upload{}, tooLarge
	}
	if n < head {
		return mem, nil
	}
	defer mem.discard()
	tmp, err := os.CreateTemp(dir, "e2b-upload-*")
	if err != nil {
		return upload{}, err
	}
	u := upload{file: tmp}
	if _, err = tmp.Write(mem.content); err == nil {
		var rest int64
		rest, err = io.Copy(tmp, io.LimitReader(body, limit-n+1))
		u.size = n + rest
	}
	if err == nil && u.size > limit {
		u.discard()
		return upload{}, tooLarge
	}
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		u.discard()
		return upload{}, badRequest("the upload broke off: %v", err)
	}
	return u, nil
}
