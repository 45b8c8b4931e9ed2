// Package devdeploy installs the Helm chart on the local cluster the way an operator
// installs it: the release's images pushed to the cluster's registry and pulled by the real
// node's containerd, the security material an operator provides in Secrets (a development
// bundle), `helm install --wait` with two controllers and two gateways as Pods on the real
// node, and the gateway reached through its Service (a NodePort on the node's address).
// The deployment test (test/deploy) and `make deploy` use it.
//
// Invariant: nothing here substitutes for what a cluster provides — no hostNetwork, no API
// server address override, no port-forward: the Pods reach the API server through the
// kubernetes Service, the controller through its Service's name (cluster DNS), and the
// caller the gateway through kube-proxy's NodePort.
package devdeploy
