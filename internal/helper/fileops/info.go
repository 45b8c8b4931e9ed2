package fileops

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// versionPrefix names the version scheme, so a later scheme can never collide with it.
const versionPrefix = "v1-"

// version derives a regular file's content version from its identity and change times.
// Writes replace the file by rename (a new inode), and any in-place change by a command
// moves ctime, so the version changes whenever the content may have; reading the content is
// not needed, so it costs nothing on large files.
func version(st *unix.Stat_t) string {
	var b [48]byte
	binary.LittleEndian.PutUint64(b[0:], st.Dev)
	binary.LittleEndian.PutUint64(b[8:], st.Ino)
	binary.LittleEndian.PutUint64(b[16:], uint64(st.Size))
	binary.LittleEndian.PutUint64(b[24:], uint64(st.Mtim.Nano()))
	binary.LittleEndian.PutUint64(b[32:], uint64(st.Ctim.Nano()))
	binary.LittleEndian.PutUint64(b[40:], uint64(st.Nlink))
	sum := sha256.Sum256(b[:])
	return versionPrefix + base64.RawURLEncoding.EncodeToString(sum[:18])
}

func fileType(mode uint32) executionv1.FileType {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return executionv1.FileType_FILE_TYPE_REGULAR
	case unix.S_IFDIR:
		return executionv1.FileType_FILE_TYPE_DIRECTORY
	case unix.S_IFLNK:
		return executionv1.FileType_FILE_TYPE_SYMLINK
	default:
		return executionv1.FileType_FILE_TYPE_OTHER
	}
}

// infoFromStat builds a FileInfo. For a symlink, target is its stored target.
func infoFromStat(path string, st *unix.Stat_t, target []byte) *executionv1.FileInfo {
	info := &executionv1.FileInfo{
		Path:       []byte(path),
		Type:       fileType(st.Mode),
		Size:       uint64(st.Size),
		Mode:       st.Mode & 0o7777,
		ModifiedAt: timestamppb.New(time.Unix(st.Mtim.Sec, st.Mtim.Nsec)),
	}
	if info.Type == executionv1.FileType_FILE_TYPE_REGULAR {
		info.Version = version(st)
	}
	if info.Type == executionv1.FileType_FILE_TYPE_SYMLINK {
		info.SymlinkTarget = target
	}
	return info
}

// statAt lstat's name in dirfd and reads a symlink's target.
func statAt(dirfd int, name, path string) (*executionv1.FileInfo, *unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, nil, fromErrno("stat", err)
	}
	var target []byte
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, MaxPathBytes)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return nil, nil, fromErrno("readlink", err)
		}
		target = buf[:n]
	}
	return infoFromStat(path, &st, target), &st, nil
}
