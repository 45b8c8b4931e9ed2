package podexec

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/session"
	"github.com/execplane/execplane/pkg/apierror"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// ExecuteFunc runs one whole helper request at t (Pool.Execute, or any executor of whole requests).
type ExecuteFunc func(ctx context.Context, t Target, req *helperv1.Request, responseCap int) (*helperv1.Response, error)

// Whole performs a call with a body through execute as one whole request: a write's body
// gathered first (at most req.body_bytes, bounded by the file limit), a read's content
// handed to the Download at the end. The response is as Stream's: a read's content empty.
func Whole(ctx context.Context, execute ExecuteFunc, t Target, req *helperv1.Request, responseCap int, tr session.Transfer) (*helperv1.Response, error) {
	req = proto.CloneOf(req)
	if tr.Upload != nil {
		write := req.GetFile().GetWrite()
		if write == nil {
			return nil, fmt.Errorf("%w: a body is the content of a write", apierror.ErrInvalidArgument)
		}
		content, err := gather(req.GetBodyBytes(), tr.Upload)
		if err != nil {
			return nil, err
		}
		write.Content = content
	}
	req.BodyBytes, req.BodyResponse = 0, false
	resp, err := execute(ctx, t, req, responseCap)
	if err != nil || tr.Download == nil {
		return resp, err
	}
	if read := resp.GetFile().GetRead(); read != nil && len(read.GetContent()) > 0 {
		content := read.GetContent()
		read.Content = nil
		if err := tr.Download(content); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// gather reads exactly size bytes of a body.
func gather(size uint64, next func() ([]byte, error)) ([]byte, error) {
	content := make([]byte, 0, size)
	for {
		piece, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if uint64(len(piece)) > size-uint64(len(content)) {
			return nil, fmt.Errorf("%w: more than %d bytes", session.ErrBodySize, size)
		}
		content = append(content, piece...)
	}
	if uint64(len(content)) != size {
		return nil, fmt.Errorf("%w: %d of %d bytes", session.ErrBodySize, len(content), size)
	}
	return content, nil
}

// Transfer is a call's body, carried as it goes (session.Transfer): the handlers hand one to
// Pool.Stream or Whole without reaching into the session themselves.
type Transfer = session.Transfer

// ErrBodySize: a body was not the size its request announced; nothing was written.
var ErrBodySize = session.ErrBodySize
