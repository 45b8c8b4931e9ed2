package fileops

import (
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Limits are the request's bounds (from the profile).
type Limits struct {
	MaxFileBytes uint64
}

// Do performs one file operation.
func (r *Root) Do(op *executionv1.FileOperation, lim Limits) (*executionv1.FileResult, error) {
	if lim.MaxFileBytes == 0 || lim.MaxFileBytes > protocol.MaxFileBytesCeiling {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "max_file_bytes must be 1..%d", protocol.MaxFileBytesCeiling)
	}
	var res executionv1.FileResult
	var err error
	switch o := op.GetOperation().(type) {
	case *executionv1.FileOperation_Read:
		var v *executionv1.ReadFileResult
		v, err = r.read(o.Read, lim)
		res.Result = &executionv1.FileResult_Read{Read: v}
	case *executionv1.FileOperation_Write:
		var v *executionv1.WriteFileResult
		v, err = r.write(o.Write, lim)
		res.Result = &executionv1.FileResult_Write{Write: v}
	case *executionv1.FileOperation_Stat:
		var v *executionv1.StatFileResult
		v, err = r.stat(o.Stat)
		res.Result = &executionv1.FileResult_Stat{Stat: v}
	case *executionv1.FileOperation_List:
		var v *executionv1.ListDirectoryResult
		v, err = r.list(o.List)
		res.Result = &executionv1.FileResult_List{List: v}
	case *executionv1.FileOperation_Mkdir:
		var v *executionv1.MakeDirectoryResult
		v, err = r.mkdir(o.Mkdir)
		res.Result = &executionv1.FileResult_Mkdir{Mkdir: v}
	case *executionv1.FileOperation_Remove:
		var v *executionv1.RemovePathResult
		v, err = r.remove(o.Remove)
		res.Result = &executionv1.FileResult_Remove{Remove: v}
	case *executionv1.FileOperation_Rename:
		var v *executionv1.RenamePathResult
		v, err = r.rename(o.Rename)
		res.Result = &executionv1.FileResult_Rename{Rename: v}
	case *executionv1.FileOperation_Copy:
		var v *executionv1.CopyPathResult
		v, err = r.copy(o.Copy, lim)
		res.Result = &executionv1.FileResult_Copy{Copy: v}
	case *executionv1.FileOperation_Glob:
		var v *executionv1.GlobResult
		v, err = r.glob(o.Glob)
		res.Result = &executionv1.FileResult_Glob{Glob: v}
	case *executionv1.FileOperation_Grep:
		var v *executionv1.GrepResult
		v, err = r.grep(o.Grep, lim)
		res.Result = &executionv1.FileResult_Grep{Grep: v}
	default:
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "no file operation")
	}
	if err != nil {
		return nil, err
	}
	return &res, nil
}
