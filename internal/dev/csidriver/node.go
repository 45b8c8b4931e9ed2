package csidriver

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// node is the CSI node service: a volume is published by bind-mounting its directory on
// the kubelet's target path (no staging).
type node struct {
	csi.UnimplementedNodeServer
	d *Driver
}

func (n node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.d.opts.NodeID}, nil
}

func (node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (n node) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	d := n.d
	target := req.GetTargetPath()
	if err := checkTarget(req.GetVolumeId(), target); err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() == nil {
		return nil, invalid("a volume capability is required")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.st.Volumes[req.GetVolumeId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q", req.GetVolumeId())
	}
	mounted, err := isMountPoint(target)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(d.path(volumesDir, req.GetVolumeId()), target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount: %v", err)
	}
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "read-only remount: %v", err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if err := checkTarget(req.GetVolumeId(), target); err != nil {
		return nil, err
	}
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	for {
		mounted, err := isMountPoint(target)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if !mounted {
			break
		}
		if err := unix.Unmount(target, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmount: %v", err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// checkTarget refuses a publication without a volume or an absolute target path.
func checkTarget(volumeID, target string) error {
	switch {
	case volumeID == "":
		return invalid("a volume ID is required")
	case target == "" || !filepath.IsAbs(target):
		return invalid("an absolute target path is required")
	}
	return nil
}

// isMountPoint reports whether path is a mount point in this mount namespace.
func isMountPoint(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	path = filepath.Clean(path)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount-point options ...
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountPath(fields[4]) == path {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
