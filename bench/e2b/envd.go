package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"time"
)

// goPairs alternates two Go sides n times after warmup, rotating which goes first.
func goPairs(ctx context.Context, n, warmup int, a, b func(context.Context) error) ([2]latencies, error) {
	var out [2]latencies
	sides := [2]func(context.Context) error{a, b}
	for i := range warmup + n {
		for j := range 2 {
			k := (i + j) % 2
			t0 := time.Now()
			if err := sides[k](ctx); err != nil {
				return out, err
			}
			if i >= warmup {
				out[k] = append(out[k], time.Since(t0))
			}
		}
	}
	return out, nil
}

// envdClient makes the SDK's /files calls with Go's HTTP client.
type envdClient struct{ url, sandbox, token string }

func (e envdClient) do(req *http.Request) (*http.Response, error) {
	req.Header.Set("E2b-Sandbox-Id", e.sandbox)
	req.Header.Set("X-Access-Token", e.token)
	resp, err := http.DefaultClient.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err = fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status)
	}
	return resp, err
}

func (e envdClient) write(ctx context.Context, path string, data []byte) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, err := mw.CreateFormFile("file", path)
	if err == nil {
		_, err = part.Write(data)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/files?path="+path, &body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := e.do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

func (e envdClient) read(ctx context.Context, path string, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/files?path="+path, nil)
	if err != nil {
		return err
	}
	resp, err := e.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && n != int64(want) {
		err = fmt.Errorf("read %d bytes", n)
	}
	return err
}
