package podexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/internal/session"
	"github.com/execplane/execplane/pkg/apierror"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Errors of the data plane's exec leg.
var (
	// ErrProtocol: the executor answered outside the helper protocol (a bad length, a frame
	// over the cap, an undecodable or second response, trailing bytes, a non-zero exit). Its
	// output is never trusted; the caller gets INTERNAL.
	ErrProtocol = protocol.ErrViolation
	// ErrOutcomeUnknown: the exec stream broke after the request was sent; a command may
	// have run. Reported honestly as UNKNOWN, never retried.
	ErrOutcomeUnknown = apierror.ErrOutcomeUnknown
	// ErrExecutorUnreachable: the API server refused the exec upgrade (the Pod is gone,
	// exec is forbidden, the node is unreachable): no stream, so nothing ran.
	ErrExecutorUnreachable = apierror.ErrExecutorUnreachable
)

// stderrCap bounds what the helper's stderr may hold in memory (for the log, never the
// caller): the helper writes nothing there in normal operation.
const stderrCap = 4 << 10

// ExecConfig configures an Exec.
type ExecConfig struct {
	// HelperPath is the helper's absolute path inside executor containers (fixed argv).
	HelperPath string
	// Container is the executor container (default executor.ContainerName).
	Container string
}

// PodRef names an executor Pod exactly.
type PodRef struct {
	Name string
	UID  types.UID
}

// Exec runs one helper invocation in an executor Pod through pods/exec: WebSocket,
// falling back to SPDY only when the upgrade itself failed (so a command never runs twice).
type Exec struct {
	cfg       ExecConfig
	rest      *rest.Config
	kube      kubernetes.Interface
	namespace string
}

// NewExec returns an Exec; it refuses a relative helper path.
func NewExec(cfg ExecConfig, restCfg *rest.Config, namespace string) (*Exec, error) {
	if cfg.HelperPath == "" || cfg.HelperPath[0] != '/' || restCfg == nil || namespace == "" {
		return nil, errors.New("pod executor: an absolute helper path, a REST config and a namespace are required")
	}
	if cfg.Container == "" {
		cfg.Container = executor.ContainerName
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	return &Exec{cfg: cfg, rest: restCfg, kube: kube, namespace: namespace}, nil
}

// StreamExecutor returns the executor of one pods/exec call to url: WebSocket, falling back
// to SPDY only when the upgrade itself failed (so a command never runs twice).
func StreamExecutor(cfg *rest.Config, url *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", url.String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", url)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// Execute sends req to the helper in pod and returns its Response, read with at most
// responseCap bytes per frame (the caller derives it from the profile's limits). The call
// ends when ctx does: the stream is closed, and the helper, seeing stdin end, kills what it
// runs.
func (e *Exec) Execute(ctx context.Context, pod PodRef, req *helperv1.Request, responseCap int) (*helperv1.Response, error) {
	if responseCap <= 0 || responseCap > protocol.MaxResponseBytes {
		responseCap = protocol.MaxResponseBytes
	}
	if err := e.checkPod(ctx, pod); err != nil {
		return nil, err
	}
	var request bytes.Buffer
	if err := protocol.WriteFrame(&request, req, protocol.MaxRequestBytes); err != nil {
		return nil, err
	}
	exec, err := e.helperExec(pod)
	if err != nil {
		return nil, err
	}

	ctx, abort := context.WithCancel(ctx)
	defer abort()
	// stdin: the request, then held open until the response is read (EOF cancels a command).
	stdinR, stdinW := io.Pipe()
	stdinDone := make(chan struct{})
	closeStdin := sync.OnceFunc(func() { close(stdinDone) })
	// delivered says whether the exec stream took the whole request: the transport reads
	// stdin only once the stream is up, and the helper acts only on a whole frame, so an
	// undelivered request proves that nothing ran.
	delivered := make(chan bool, 1)
	go func() {
		_, err := stdinW.Write(request.Bytes())
		delivered <- err == nil
		if err == nil {
			select {
			case <-stdinDone:
			case <-ctx.Done():
			}
		}
		stdinW.Close()
	}()
	stdoutR, stdoutW := io.Pipe()
	read := make(chan protocol.ReadResult, 1)
	go func() { read <- protocol.ReadResponse(stdoutR, responseCap, closeStdin, abort) }()
	stderr := &capped{limit: stderrCap}
	streamErr := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW, Stderr: stderr})
	stdoutW.CloseWithError(io.EOF)
	stdinR.Close() // ends a Write still waiting for a reader
	sent := <-delivered
	res := <-read

	var code utilexec.CodeExitError
	switch {
	case res.Err != nil:
		return nil, res.Err
	case res.Resp == nil && sent && errors.As(streamErr, &code) && killedBySignal(code.Code):
		// The stream took the request and the helper died by a signal without answering —
		// most often the kernel's OOM killer, when the workload took the container's memory
		// (a command of the workload is its first choice, but the helper can be the largest
		// process); the workload can also kill it. Either way the command may have run: the
		// outcome is unknown, which a caller never retries blindly. Not a protocol violation.
		return nil, fmt.Errorf("%w: the helper died by signal %d before it answered (the OOM killer, or the workload)",
			ErrOutcomeUnknown, code.Code-signalExitBase)
	case streamErr != nil && errors.As(streamErr, &code):
		return nil, fmt.Errorf("%w: the helper exited with %d", ErrProtocol, code.Code)
	case res.Resp == nil && streamErr != nil && !sent:
		return nil, fmt.Errorf("%w: %v", ErrExecutorUnreachable, streamErr)
	case res.Resp == nil && streamErr != nil:
		return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, streamErr)
	case res.Resp == nil:
		return nil, fmt.Errorf("%w: no response", ErrProtocol)
	case streamErr != nil:
		// A response, but the helper did not exit cleanly before the call ended.
		return nil, fmt.Errorf("%w: the stream did not end after the response: %v", ErrProtocol, streamErr)
	case res.Resp.GetRequestId() != req.GetRequestId():
		return nil, fmt.Errorf("%w: response for another request", ErrProtocol)
	}
	return res.Resp, nil
}

// openSession starts the helper with --session in pod and opens a session on it. The stream
// lives until the session closes, whatever becomes of ctx (which bounds only the opening).
// A helper that refused the flag (it exited without a frame) is session.ErrUnsupported; a
// stream that could not be opened is ErrExecutorUnreachable.
func (e *Exec) openSession(ctx context.Context, pod PodRef, cfg session.Config) (*session.Session, error) {
	if err := e.checkPod(ctx, pod); err != nil {
		return nil, err
	}
	exec, err := e.helperExec(pod, sessionFlag)
	if err != nil {
		return nil, err
	}
	streamCtx, end := context.WithCancel(context.Background())
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		err := exec.StreamWithContext(streamCtx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW, Stderr: &capped{limit: stderrCap}})
		stdoutW.CloseWithError(io.EOF)
		stdinR.Close()
		ended <- err
	}()
	s, err := session.Open(ctx, cfg, stdinW, stdoutR, end)
	switch {
	case errors.Is(err, session.ErrUnsupported) && s == nil:
		// The stream ended before a frame, or the helper refused the version. Only a helper
		// that refused the flag — a usage error, before it read anything — does not speak
		// sessions; a helper killed during the handshake, or a stream that never came up,
		// says nothing about sessions, and nothing ran.
		var code utilexec.CodeExitError
		streamErr := <-ended
		if streamErr == nil || errors.Is(streamErr, context.Canceled) || (errors.As(streamErr, &code) && code.Code == usageExit) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: opening a session: %v", ErrExecutorUnreachable, streamErr)
	case err != nil && !errors.Is(err, session.ErrViolation):
		return nil, fmt.Errorf("%w: opening a session: %v", ErrExecutorUnreachable, err)
	}
	return s, err
}

// Terminal starts the helper with --terminal in pod and sends it req, a TerminalOpen. The
// stream lives until ctx ends or the terminal does. A stream that
// never took the request is ErrExecutorUnreachable: nothing ran.
func (e *Exec) Terminal(ctx context.Context, pod PodRef, req *helperv1.Request) (*Terminal, error) {
	if err := e.checkPod(ctx, pod); err != nil {
		return nil, err
	}
	var first bytes.Buffer
	if err := protocol.WriteFrame(&first, req, protocol.MaxRequestBytes); err != nil {
		return nil, err
	}
	exec, err := e.helperExec(pod, terminalFlag)
	if err != nil {
		return nil, err
	}
	ctx, abort := context.WithCancel(ctx)
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW, Stderr: &capped{limit: stderrCap}})
		stdoutW.CloseWithError(io.EOF)
		stdinR.Close() // ends a write still waiting for the transport
		ended <- err
	}()
	c := &Terminal{in: stdinW, out: stdoutR, abort: abort, ended: ended}
	// The transport reads stdin only once the stream is up: a request it did not take
	// proves that nothing ran.
	if _, err := stdinW.Write(first.Bytes()); err != nil {
		abort()
		return nil, fmt.Errorf("%w: %v", ErrExecutorUnreachable, <-ended)
	}
	return c, nil
}

// terminalFlag starts the helper in terminal mode (fixed argv).
const terminalFlag = "--terminal"

// helperExec is the executor of one pods/exec call starting the helper in pod with flags
// (fixed argv), its stdin, stdout and stderr streamed.
func (e *Exec) helperExec(pod PodRef, flags ...string) (remotecommand.Executor, error) {
	opts := &corev1.PodExecOptions{Container: e.cfg.Container, Command: append([]string{e.cfg.HelperPath}, flags...), Stdin: true, Stdout: true, Stderr: true}
	url := e.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec).URL()
	return StreamExecutor(e.rest, url)
}

// usageExit is the helper's exit status for a usage error (an unknown flag): cli.ExitUsage.
const usageExit = 2

// sessionFlag starts the helper in session mode (fixed argv).
const sessionFlag = "--session"

// signalExitBase is how a container runtime reports a process killed by signal n: exit
// status signalExitBase+n.
const signalExitBase = 128

// killedBySignal reports whether an exit status is a death by signal (SIGKILL is 137).
func killedBySignal(status int) bool { return status > signalExitBase && status <= signalExitBase+64 }

// checkPod refuses to exec into a Pod that is not the one the environment records: a Pod of
// the same name with another UID (re-created behind this gateway's view) would otherwise
// receive a request authorised for its predecessor. Nothing has run, so the answer is
// ErrExecutorUnreachable (retryable: the controller records what happened, and the retry is
// judged by that). The read is served from the API server's watch cache (resourceVersion
// "0"): a read, never an etcd round trip or a write, on the data path.
func (e *Exec) checkPod(ctx context.Context, pod PodRef) error {
	p, err := e.kube.CoreV1().Pods(e.namespace).Get(ctx, pod.Name, metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: the executor Pod is gone", ErrExecutorUnreachable)
	case err != nil:
		return fmt.Errorf("%w: reading the executor Pod: %v", ErrExecutorUnreachable, err)
	case p.UID != pod.UID:
		return fmt.Errorf("%w: the Pod of that name is not the environment's executor (another UID)", ErrExecutorUnreachable)
	}
	return nil
}

// capped keeps the first limit bytes written and discards the rest.
type capped struct {
	mu    sync.Mutex
	limit int
	buf   bytes.Buffer
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.limit - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
