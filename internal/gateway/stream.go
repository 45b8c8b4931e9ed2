package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// MaxStreamPiece bounds one message's content in WriteFileStream and ReadFileStream: four
// session chunks, so that a piece is forwarded soon after it arrived, while a caller's
// messages stay far below the gateway's message cap.
const MaxStreamPiece = 1 << 20

// BodyExecutor is an Executor that can also carry a call's content as a body, forwarded as
// it goes (podexec.Pool). Without one, the handler sends whole requests (podexec.Whole).
type BodyExecutor interface {
	Stream(ctx context.Context, t podexec.Target, req *helperv1.Request, responseCap int, tr podexec.Transfer) (*helperv1.Response, error)
}

// stream runs a call with a body: over the Executor's bodies when it has them.
func (h *Handler) stream(ctx context.Context, a *admitted, req *helperv1.Request, responseCap int, tr podexec.Transfer) (*helperv1.Response, error) {
	run := func(ctx context.Context, t podexec.Target, req *helperv1.Request, responseCap int) (*helperv1.Response, error) {
		if be, ok := h.b.Executor.(BodyExecutor); ok {
			return be.Stream(ctx, t, req, responseCap, tr)
		}
		return podexec.Whole(ctx, h.b.Executor.Execute, t, req, responseCap, tr)
	}
	resp, err := h.run(ctx, a, req, responseCap, run)
	if errors.Is(err, podexec.ErrBodySize) {
		return nil, fmt.Errorf("%w: the content is not the size announced (%v): nothing was written", apierror.ErrInvalidArgument, err)
	}
	return resp, err
}

// WriteFileStream implements ExecutionProviderService: the first message is checked and
// admitted like a Files write of its size, then the content is forwarded as it arrives.
func (h *Handler) WriteFileStream(stream grpc.ClientStreamingServer[executionv1.WriteFileStreamRequest, executionv1.WriteFileStreamResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: no first message", apierror.ErrInvalidArgument)
	}
	if err != nil {
		return err
	}
	write := first.GetWrite()
	switch {
	case write == nil:
		return fmt.Errorf("%w: write: required in the first message", apierror.ErrInvalidArgument)
	case len(write.GetContent()) > 0:
		return fmt.Errorf("%w: write.content: must be empty (the content travels in content)", apierror.ErrInvalidArgument)
	case len(first.GetContent()) > MaxStreamPiece:
		return fmt.Errorf("%w: content: at most %d bytes per message", apierror.ErrInvalidArgument, MaxStreamPiece)
	}
	op := &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: write}}
	file, err := protocol.DescribeFile(op)
	if err == nil {
		err = file.Validate()
	}
	if err != nil {
		return podexec.HelperError(err)
	}
	a, err := h.admit(ctx, first.GetRunGrant(), first.GetEnvironment())
	if err != nil {
		return err
	}
	size := first.GetSize()
	if size > a.limits.GetMaxFileBytes() {
		return podexec.HelperError(protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "write of %d bytes exceeds the profile's max_file_bytes %d", size, a.limits.GetMaxFileBytes()))
	}
	pending := first.GetContent()
	next := func() ([]byte, error) {
		for len(pending) == 0 {
			m, err := stream.Recv()
			if err != nil {
				return nil, err // io.EOF: the caller's side ended
			}
			if m.GetRunGrant() != nil || m.GetEnvironment() != nil || m.GetWrite() != nil || m.GetSize() != 0 {
				return nil, fmt.Errorf("%w: only the first message names the write", apierror.ErrInvalidArgument)
			}
			if len(m.GetContent()) > MaxStreamPiece {
				return nil, fmt.Errorf("%w: content: at most %d bytes per message", apierror.ErrInvalidArgument, MaxStreamPiece)
			}
			pending = m.GetContent()
		}
		p := pending
		pending = nil
		return p, nil
	}
	req := &helperv1.Request{Limits: a.limits, Operation: &helperv1.Request_File{File: op}, BodyBytes: size}
	var resp *helperv1.Response
	if size == 0 {
		if _, err := next(); !errors.Is(err, io.EOF) {
			if err == nil {
				err = fmt.Errorf("%w: content beyond the 0 bytes announced", apierror.ErrInvalidArgument)
			}
			return err
		}
		resp, err = h.execute(ctx, a, req, file.ResponseCap(a.limits))
	} else {
		resp, err = h.stream(ctx, a, req, file.ResponseCap(a.limits), podexec.Transfer{Upload: next})
	}
	if err != nil {
		return err
	}
	res := resp.GetFile()
	if !file.Matches(res) {
		return fmt.Errorf("%w: a result of another kind than the operation", podexec.ErrProtocol)
	}
	return stream.SendAndClose(&executionv1.WriteFileStreamResponse{Result: res.GetWrite()})
}

// ReadFileStream implements ExecutionProviderService: a Files read whose content is
// forwarded as it arrives, in messages of at most MaxStreamPiece bytes, then the result.
func (h *Handler) ReadFileStream(in *executionv1.ReadFileStreamRequest, stream grpc.ServerStreamingServer[executionv1.ReadFileStreamResponse]) error {
	ctx := stream.Context()
	if in.GetRead() == nil {
		return fmt.Errorf("%w: read: required", apierror.ErrInvalidArgument)
	}
	op := &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: in.GetRead()}}
	file, err := protocol.DescribeFile(op)
	if err == nil {
		err = file.Validate()
	}
	if err != nil {
		return podexec.HelperError(err)
	}
	a, err := h.admit(ctx, in.GetRunGrant(), in.GetEnvironment())
	if err != nil {
		return err
	}
	if err := file.WithinLimits(a.limits); err != nil {
		return podexec.HelperError(err)
	}
	send := func(content []byte) error {
		for len(content) > 0 {
			n := min(len(content), MaxStreamPiece)
			if err := stream.Send(&executionv1.ReadFileStreamResponse{Content: content[:n]}); err != nil {
				return err
			}
			content = content[n:]
		}
		return nil
	}
	req := &helperv1.Request{Limits: a.limits, Operation: &helperv1.Request_File{File: op}, BodyResponse: true}
	resp, err := h.stream(ctx, a, req, file.ResponseCap(a.limits), podexec.Transfer{Download: send})
	if err != nil {
		return err
	}
	res := resp.GetFile()
	if !file.Matches(res) || len(res.GetRead().GetContent()) > 0 {
		return fmt.Errorf("%w: a result of another kind than the operation", podexec.ErrProtocol)
	}
	return stream.Send(&executionv1.ReadFileStreamResponse{Result: res.GetRead()})
}
