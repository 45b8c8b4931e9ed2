package main

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/gateway"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// rawExec is the baseline: a plain client-go remotecommand exec into the executor Pod —
// the same WebSocket-with-SPDY-fallback executor the gateway's PodExecutor uses — with no
// gateway, no grant and no helper.
type rawExec struct {
	rest      *rest.Config
	kube      kubernetes.Interface
	namespace string
	pod       string
}

// run executes argv in the executor container with stdin (nil for none) and returns stdout.
func (r rawExec) run(ctx context.Context, stdin []byte, argv ...string) ([]byte, error) {
	opts := &corev1.PodExecOptions{Container: executor.ContainerName, Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true}
	url := r.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.namespace).Name(r.pod).SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec).URL()
	exec, err := gateway.StreamExecutor(r.rest, url)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	so := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}
	if stdin != nil {
		so.Stdin = bytes.NewReader(stdin)
	}
	if err := exec.StreamWithContext(ctx, so); err != nil {
		return nil, fmt.Errorf("raw exec %v: %w (stderr %q)", argv, err, truncate(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

func truncate(b []byte) []byte { return b[:min(len(b), 256)] }

// helperLeg is the gateway's exec leg without the gateway: its PodExecutor, in this process,
// sending the helper the request the gateway would send.
type helperLeg struct {
	executor *gateway.PodExecutor
	pod      gateway.PodRef
}

func (l *helperLeg) call(ctx context.Context, req *helperv1.Request) error {
	resp, err := l.executor.Execute(ctx, l.pod, req, 0)
	if err != nil {
		return err
	}
	if e := resp.GetError(); e != nil {
		return fmt.Errorf("helper: %s", e.GetCode())
	}
	return nil
}

// benchLimits are the bench profile's limits, as the gateway passes them to the helper.
var benchLimits = &helperv1.Limits{MaxFileBytes: 8 << 20, MaxCommandBytes: 64 << 10, MaxCommandMillis: 60_000}

func fileRequest(op *executionv1.FileOperation) *helperv1.Request {
	return &helperv1.Request{Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: "bench", Limits: benchLimits,
		Operation: &helperv1.Request_File{File: op}}
}

func commandRequest(spec *executionv1.CommandSpec) *helperv1.Request {
	return &helperv1.Request{Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: "bench", Limits: benchLimits,
		Operation: &helperv1.Request_Command{Command: spec}}
}

func readOp(path string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte(path)}}}
}

func writeOp(path string, content []byte) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte(path), Content: content, Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}}
}
