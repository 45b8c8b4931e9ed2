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
	"github.com/execplane/execplane/internal/podexec"
)

// rawExec is the baseline: a plain client-go remotecommand exec into the executor Pod —
// the same WebSocket-with-SPDY-fallback executor the gateway's podexec.Exec uses — with no
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
	exec, err := podexec.StreamExecutor(r.rest, url)
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
