package csidriver

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// controller is the CSI controller service.
type controller struct {
	csi.UnimplementedControllerServer
	d *Driver
}

var controllerCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
}

func (controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range controllerCaps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return resp, nil
}

// checkCapabilities refuses what a directory on one node cannot be: a block device, or a
// volume shared between nodes.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return invalid("volume capabilities are required")
	}
	for _, c := range caps {
		if c.GetMount() == nil {
			return invalid("only mount volumes are supported")
		}
		switch c.GetAccessMode().GetMode() {
		case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
			csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		default:
			return invalid("only single-node access modes are supported")
		}
	}
	return nil
}

func (c controller) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	d := c.d
	if req.GetName() == "" {
		return nil, invalid("a name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	want, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if want < 0 || limit < 0 || (limit > 0 && want > limit) {
		return nil, invalid("the capacity range is inconsistent")
	}
	if want > d.opts.MaxVolumeBytes || limit > d.opts.MaxVolumeBytes && want == 0 {
		return nil, status.Errorf(codes.OutOfRange, "at most %d bytes", d.opts.MaxVolumeBytes)
	}
	if want == 0 {
		want = min(limit, 1<<30)
		if want == 0 {
			want = 1 << 30
		}
	}
	v := &volume{ID: objectID("v", req.GetName()), Name: req.GetName(), Bytes: want}
	from := ""
	switch src := req.GetVolumeContentSource(); {
	case src.GetSnapshot() != nil:
		v.Snapshot = src.GetSnapshot().GetSnapshotId()
	case src.GetVolume() != nil:
		v.Clone = src.GetVolume().GetVolumeId()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.st.Volumes[v.ID]; ok {
		if old.Bytes < want || (limit > 0 && old.Bytes > limit) || old.Snapshot != v.Snapshot || old.Clone != v.Clone {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with other parameters", v.Name)
		}
		return &csi.CreateVolumeResponse{Volume: old.csi()}, nil
	}
	switch {
	case v.Snapshot != "":
		s, ok := d.st.Snapshots[v.Snapshot]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "snapshot %q", v.Snapshot)
		}
		if limit > 0 && s.Bytes > limit {
			return nil, status.Errorf(codes.OutOfRange, "the snapshot holds %d bytes", s.Bytes)
		}
		v.Bytes = max(v.Bytes, s.Bytes) // never less than it holds
		from = d.path(snapshotsDir, s.ID)
	case v.Clone != "":
		if _, ok := d.st.Volumes[v.Clone]; !ok {
			return nil, status.Errorf(codes.NotFound, "volume %q", v.Clone)
		}
		from = d.path(volumesDir, v.Clone)
	}
	dst := d.path(volumesDir, v.ID)
	var err error
	if from != "" {
		err = copyTree(d.opts.StateDir, from, dst)
	} else {
		err = makeDir(d.opts.StateDir, dst)
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.st.Volumes[v.ID] = v
	if err := d.st.save(d.opts.StateDir); err != nil {
		delete(d.st.Volumes, v.ID)
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateVolumeResponse{Volume: v.csi()}, nil
}

func (v *volume) csi() *csi.Volume {
	out := &csi.Volume{VolumeId: v.ID, CapacityBytes: v.Bytes}
	switch {
	case v.Snapshot != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: v.Snapshot}}}
	case v.Clone != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.Clone}}}
	}
	return out
}

func (c controller) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	d := c.d
	if req.GetVolumeId() == "" {
		return nil, invalid("a volume ID is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.remove(volumesDir, req.GetVolumeId()); err != nil {
		return nil, err
	}
	delete(d.st.Volumes, req.GetVolumeId())
	if err := d.st.save(d.opts.StateDir); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (c controller) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	d := c.d
	if req.GetVolumeId() == "" {
		return nil, invalid("a volume ID is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, invalid("volume capabilities are required")
	}
	d.mu.Lock()
	_, ok := d.st.Volumes[req.GetVolumeId()]
	d.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q", req.GetVolumeId())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}

func (c controller) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	d := c.d
	if req.GetName() == "" {
		return nil, invalid("a name is required")
	}
	if req.GetSourceVolumeId() == "" {
		return nil, invalid("a source volume ID is required")
	}
	id := objectID("s", req.GetName())
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.st.Snapshots[id]; ok {
		if old.Source != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q is of another volume", req.GetName())
		}
		return &csi.CreateSnapshotResponse{Snapshot: old.csi()}, nil
	}
	if _, ok := d.st.Volumes[req.GetSourceVolumeId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q", req.GetSourceVolumeId())
	}
	dst := d.path(snapshotsDir, id)
	if err := copyTree(d.opts.StateDir, d.path(volumesDir, req.GetSourceVolumeId()), dst); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// Taken when the copy ended: the earliest time at which all of it was read.
	s := &snapshot{ID: id, Name: req.GetName(), Source: req.GetSourceVolumeId(), Taken: time.Now().UTC()}
	var err error
	if s.Bytes, err = treeBytes(dst); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.st.Snapshots[id] = s
	if err := d.st.save(d.opts.StateDir); err != nil {
		delete(d.st.Snapshots, id)
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateSnapshotResponse{Snapshot: s.csi()}, nil
}

func (s *snapshot) csi() *csi.Snapshot {
	return &csi.Snapshot{SnapshotId: s.ID, SourceVolumeId: s.Source, SizeBytes: s.Bytes,
		CreationTime: timestamppb.New(s.Taken), ReadyToUse: true}
}

func (c controller) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	d := c.d
	if req.GetSnapshotId() == "" {
		return nil, invalid("a snapshot ID is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.remove(snapshotsDir, req.GetSnapshotId()); err != nil {
		return nil, err
	}
	delete(d.st.Snapshots, req.GetSnapshotId())
	if err := d.st.save(d.opts.StateDir); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists in ID order; the token is the index of the next entry.
func (c controller) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	d := c.d
	if req.GetMaxEntries() < 0 {
		return nil, invalid("max_entries is negative")
	}
	d.mu.Lock()
	var all []*snapshot
	for _, s := range d.st.Snapshots {
		if (req.GetSnapshotId() == "" || s.ID == req.GetSnapshotId()) && (req.GetSourceVolumeId() == "" || s.Source == req.GetSourceVolumeId()) {
			all = append(all, s)
		}
	}
	d.mu.Unlock()
	slices.SortFunc(all, func(a, b *snapshot) int { return strings.Compare(a.ID, b.ID) })
	start := 0
	if tok := req.GetStartingToken(); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > len(all) {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not one of this list's", tok)
		}
		start = n
	}
	end := len(all)
	if m := int(req.GetMaxEntries()); m > 0 && start+m < end {
		end = start + m
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, s := range all[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: s.csi()})
	}
	if end < len(all) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

// path is the directory of the object id of kind (volumesDir or snapshotsDir). IDs come
// from callers: only an ID's last element is used (callers look IDs up in the state first,
// or refuse what is not a plain name), so no ID reaches outside the state directory.
func (d *Driver) path(kind, id string) string {
	if kind == snapshotsDir {
		return SnapshotDir(d.opts.StateDir, id)
	}
	return VolumeDir(d.opts.StateDir, id)
}

// remove deletes the directory of the object id (absent is done).
func (d *Driver) remove(kind, id string) error {
	if id != filepath.Base(id) || id == "." || id == ".." {
		return nil // never one of ours
	}
	if err := discard(d.opts.StateDir, d.path(kind, id)); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}
