package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group.
const GroupName = "execution.mecatl.dev"

// Version is the API version.
const Version = "v1alpha1"

// ResourceName is the plural resource name.
const ResourceName = "executionenvironments"

// SchemeGroupVersion is the group and version of these types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// ExecutionEnvironmentGVR is the resource, for clients and RBAC rules.
var ExecutionEnvironmentGVR = SchemeGroupVersion.WithResource(ResourceName)

// Kind returns a group-qualified GroupKind for kind.
func Kind(kind string) schema.GroupKind { return SchemeGroupVersion.WithKind(kind).GroupKind() }

// Resource returns a group-qualified GroupResource for resource (the generated listers use
// it for NotFound errors).
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers these types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds these types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &ExecutionEnvironment{}, &ExecutionEnvironmentList{}, &ExecutionUsage{}, &ExecutionUsageList{}, &ExecutionAllocation{}, &ExecutionAllocationList{}, &ExecutionSnapshot{}, &ExecutionSnapshotList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
