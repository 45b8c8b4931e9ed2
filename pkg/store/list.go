package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
)

// ListEnvironments pages through the environments the caller created for an owner, ordered
// by name, optionally of one binding, with some metadata, or those Match accepts. Deleted
// environments (tombstones) are not listed: every other call answers them as absent. One
// binding's is read from the API server (current); a listing of many from the leader's
// cache (a moment behind the writes).
func (s *Store) ListEnvironments(ctx context.Context, in ListEnvironmentsInput) (*EnvironmentPage, error) {
	var c checker
	c.caller(in.Caller)
	c.owner("owner", in.Owner)
	if in.BindingID != "" {
		c.Identifier("binding_id", in.BindingID)
	}
	c.Metadata("metadata", in.Metadata)
	c.PageSize("page_size", in.PageSize)
	if in.PageToken != "" {
		if _, ok := decodeNameToken(in.PageToken); !ok {
			c.Fail("page_token", "is not a token this API issued")
		}
	}
	if c.Err() != nil {
		return nil, c.Err()
	}
	if !in.Caller.Capabilities.MayAttestOwner {
		return nil, fmt.Errorf("%w: the client may not attest owners", apierror.ErrPermissionDenied)
	}
	after, _ := decodeNameToken(in.PageToken)
	size := in.PageSize
	if size == 0 {
		size = defPageSize
	}
	var envs []*executionv1alpha1.ExecutionEnvironment
	if in.BindingID != "" {
		// One binding has one name: a read of the API server, not of the cache, so that a
		// caller reads its own writes (a deadline moved, a delete started) in the answer.
		name := EnvironmentName(in.Caller.Client, OwnerHash(in.Owner), in.BindingID)
		env, err := s.client().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			envs = append(envs, env)
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	} else {
		all, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		envs = all
	}
	client, owner := ident.ClientHash(in.Caller.Client), OwnerHash(in.Owner)
	kept := envs[:0:0]
	for _, env := range envs {
		if env.Spec.ClientHash != client || env.Spec.OwnerHash != owner || env.Status.Deleted() || env.Name <= after ||
			(in.BindingID != "" && env.Spec.BindingID != in.BindingID) || !hasMetadata(env.Spec.CallerMetadata, in.Metadata) ||
			(in.Match != nil && !in.Match(env)) {
			continue
		}
		kept = append(kept, env)
	}
	slices.SortFunc(kept, func(a, b *executionv1alpha1.ExecutionEnvironment) int { return strings.Compare(a.Name, b.Name) })
	page := &EnvironmentPage{}
	for _, env := range kept[:min(size, len(kept))] {
		page.Environments = append(page.Environments, env.DeepCopy())
	}
	if len(kept) > size {
		page.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(kept[size-1].Name))
	}
	return page, nil
}

// decodeNameToken returns the environment name a ListEnvironments token names ("" for the
// first page).
func decodeNameToken(token string) (string, bool) {
	if token == "" {
		return "", true
	}
	if len(token) > maxPageToken {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || !ident.IsDNSLabel(string(raw)) {
		return "", false
	}
	return string(raw), true
}
