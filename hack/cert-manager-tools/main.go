// Command cert-manager-controller is cert-manager's controller (pinned by this module) with
// the controllers docs/deployment.md's recipe needs — Issuers (self-signed and CA), the
// CertificateRequest approver and signers, and the Certificate controllers that issue and
// renew — wired as cert-manager's own controller binary wires them, without its webhook,
// ACME, leader election or metrics server. Built by hack/build-cert-manager.sh; run by
// internal/dev/devdeploy against the local cluster (test/deploy).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"         // the CA Issuer
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned" // the self-signed Issuer
	"golang.org/x/sync/errgroup"
)

// controllers run, by their registered names.
var controllers = []string{
	issuers.ControllerName, approver.ControllerName, crca.CRControllerName, crselfsigned.CRControllerName,
	trigger.ControllerName, keymanager.ControllerName, requestmanager.ControllerName,
	issuing.ControllerName, readiness.ControllerName, revisionmanager.ControllerName,
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the cluster's kubeconfig")
	namespace := flag.String("namespace", "", "the one namespace whose Issuers and Certificates it serves")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace string) error {
	if kubeconfig == "" || namespace == "" {
		return fmt.Errorf("--kubeconfig and --namespace are required")
	}
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig: kubeconfig, Namespace: namespace, KubernetesAPIQPS: 50, KubernetesAPIBurst: 100,
		IssuerOptions: controller.IssuerOptions{ClusterResourceNamespace: namespace},
		// A failed request is retried within seconds, not cert-manager's default hour: a
		// development cluster, whose API server may be starting.
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Second,
			CertificateRequestMaximumBackoffDuration: 10 * time.Second,
		},
	})
	if err != nil {
		return err
	}
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	known := controller.Known()
	for _, name := range controllers {
		c, err := known[name](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		g.Go(func() error { return c.Run(1, ctx) })
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	return g.Wait()
}
