package devcluster

import (
	"bytes"
	"fmt"
	"text/template"
)

// The real node's configuration files. Every path containerd and the kubelet would put
// on the machine by default is moved under the node's state directory; what cannot be
// moved is listed in hostPaths and removed on stop. The measured recipe and its blockers:
// shared/research/real-node.md.

// nodeConfig are the values the templates fill in.
type nodeConfig struct {
	State, Logs, Socket, Runc, CNIBin, SandboxImage string
	Bridge, Subnet, Network                         string
	NodeName, NodeIP, CgroupRoot                    string
	HealthzPort                                     int
	ClientCA, ServingCert, ServingKey               string
	TaintKey                                        string
	PodPidsLimit                                    int
	// ClusterDNS is the cluster DNS Service's address, ClusterDomain the cluster's domain.
	ClusterDNS, ClusterDomain string
	// APIServer is the API server's URL; ProxyKubeconfig kube-proxy's credentials.
	APIServer, ProxyKubeconfig string
	// ProxyHealthzPort and ProxyMetricsPort are kube-proxy's loopback ports.
	ProxyHealthzPort, ProxyMetricsPort int
}

// containerdTemplate is containerd 2.x's configuration (version 4).
//   - restrict_oom_score_adj: runc cannot write the negative oom_score_adj the kubelet asks
//     for without CAP_SYS_RESOURCE, which this machine's root lacks; clamped, sandboxes start.
//   - No imports, NRI off, the opt plugin's directory, runc's state and network namespaces
//     under the state directory: nothing of containerd's lands in /etc, /opt or /var.
//   - The CRI streaming server (exec, attach) on loopback, on a free port.
//   - Registry hosts under the state directory: the local registry's (registry.go).
var containerdTemplate = template.Must(template.New("containerd").Parse(`version = 4
root = '{{.State}}/containerd/root'
state = '{{.State}}/containerd/state'
temp = '{{.State}}/containerd/tmp'
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.snapshotter.v1.blockfile', 'io.containerd.snapshotter.v1.erofs', 'io.containerd.differ.v1.erofs']

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = '{{.Socket}}'
  [plugins.'io.containerd.server.v1.ttrpc']
    address = '{{.Socket}}.ttrpc'
  [plugins.'io.containerd.server.v1.debug']
    address = ''
  [plugins.'io.containerd.internal.v1.opt']
    path = '{{.State}}/containerd/opt'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{{.State}}/containerd/certs.d'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{{.SandboxImage}}'
  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = false
    cdi_spec_dirs = []
    enable_criu = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{{.Runc}}'
          Root = '{{.State}}/containerd/runc'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{{.CNIBin}}']
      conf_dir = '{{.State}}/cni/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`))

// cniTemplate is the Pod network, as a node's: a bridge that is the Pods' default gateway to the
// machine (the API server on the node address, Services through kube-proxy's rules), with
// hairpin mode so that a Pod reaches itself through a Service. No masquerading: the Pods
// reach the machine and each other, nothing beyond it (nothing routes 10.88.0.0/24 back).
var cniTemplate = template.Must(template.New("cni").Parse(`{
  "cniVersion": "1.0.0",
  "name": "{{.Network}}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "{{.Bridge}}",
      "isDefaultGateway": true,
      "hairpinMode": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "{{.State}}/cni/ipam",
        "ranges": [[{"subnet": "{{.Subnet}}"}]]
      }
    },
    {"type": "loopback"}
  ]
}
`))

// kubeletTemplate is the kubelet's configuration.
//   - failCgroupV1: false: the machine has cgroup v1 only (hybrid, no controller free for
//     v2); the kubelet refuses it by default since 1.35.
//   - cgroupfs under a cgroup root of the node's own, so a sweep of that root finds every
//     container process.
//   - The serving certificate is the cluster CA's, for the node address; clients are
//     authenticated by the cluster CA and authorised by the API server (Webhook).
//   - Eviction thresholds low and image garbage collection off: a development machine's
//     disk is often fuller than a node's would be, and the images cannot be pulled again.
//   - The Pods' pid limit bounds a fork bomb to its Pod.
var kubeletTemplate = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{{.CgroupRoot}}
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
containerRuntimeEndpoint: unix://{{.Socket}}
imageServiceEndpoint: unix://{{.Socket}}
podLogsDir: {{.Logs}}/pod-logs
address: {{.NodeIP}}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{.HealthzPort}}
tlsCertFile: {{.ServingCert}}
tlsPrivateKeyFile: {{.ServingKey}}
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  x509:
    clientCAFile: {{.ClientCA}}
  anonymous:
    enabled: false
  webhook:
    enabled: true
authorization:
  mode: Webhook
failSwapOn: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
podPidsLimit: {{.PodPidsLimit}}
registerWithTaints:
- key: {{.TaintKey}}
  value: "true"
  effect: NoSchedule
resolvConf: /etc/resolv.conf
clusterDNS: ["{{.ClusterDNS}}"]
clusterDomain: {{.ClusterDomain}}
syncFrequency: 10s
nodeStatusUpdateFrequency: 2s
`))

// kubeProxyTemplate is kube-proxy's configuration: nftables mode (its rules in tables of
// its own, ip and ip6 kube-proxy, which the ledger removes), every conntrack setting left
// as the machine has it (0), its oom_score_adj left alone (this machine's root cannot lower
// it), its ports on loopback, NodePorts on the node address.
var kubeProxyTemplate = template.Must(template.New("kube-proxy").Parse(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: {{.ProxyKubeconfig}}
hostnameOverride: {{.NodeName}}
clusterCIDR: {{.Subnet}}
healthzBindAddress: 127.0.0.1:{{.ProxyHealthzPort}}
metricsBindAddress: 127.0.0.1:{{.ProxyMetricsPort}}
nodePortAddresses: ["{{.NodeIP}}/32"]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`))

func render(t *template.Template, c nodeConfig) ([]byte, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, c); err != nil {
		return nil, fmt.Errorf("devcluster: %s config: %w", t.Name(), err)
	}
	return b.Bytes(), nil
}
