package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// nodeSide is the node process running bench.mjs.
type nodeSide struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startNode(ctx context.Context, dir, url, key string) (*nodeSide, error) {
	cmd := exec.CommandContext(ctx, "node", "bench.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+key)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &nodeSide{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// do runs one operation in node and returns the duration it measured.
func (n *nodeSide) do(op string) (time.Duration, error) {
	d, _, err := n.answer(op)
	return d, err
}

// create creates a sandbox of the template in node and returns the duration and its id.
func (n *nodeSide) create(template string) (time.Duration, string, error) {
	return n.answer("create " + template)
}

func (n *nodeSide) answer(op string) (time.Duration, string, error) {
	if _, err := fmt.Fprintln(n.in, op); err != nil {
		return 0, "", err
	}
	if !n.out.Scan() {
		return 0, "", fmt.Errorf("node ended: %v", n.out.Err())
	}
	var a struct {
		Ms    float64 `json:"ms"`
		ID    string  `json:"id"`
		Error string  `json:"error"`
	}
	if err := json.Unmarshal(n.out.Bytes(), &a); err != nil {
		return 0, "", fmt.Errorf("node answered %q", n.out.Text())
	}
	if a.Error != "" {
		return 0, "", fmt.Errorf("%s: %s", op, a.Error)
	}
	return time.Duration(a.Ms * float64(time.Millisecond)), a.ID, nil
}

func (n *nodeSide) close() {
	n.in.Close()
	_ = n.cmd.Wait()
}
