// kube-aggregator is the standalone aggregator of k8s.io/kube-aggregator v0.37.2 for
// tests/bench/side-by-side.sh. It exists because upstream's own main cannot start: that main
// gives the generic server no OpenAPI v3 config, and installing the apiregistration.k8s.io group
// then fails while building the server-side-apply type converter ("unable to get openapi models:
// OpenAPIV3 config must not be nil"). This program takes upstream's options and flags unchanged
// (k8s.io/kube-aggregator/pkg/cmd/server) and builds the same server (pkg/apiserver), with
// both OpenAPI configs made from the aggregator's generated definitions.
//
// One flag is added: --enable-aggregator-routing, as kube-apiserver has it: proxy to an
// endpoint of the Service (its EndpointSlices) instead of its cluster IP or external name.
package main

import (
	"context"
	"errors"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/sets"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/filters"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/component-base/cli"
	"k8s.io/kube-aggregator/pkg/apiserver"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	"k8s.io/kube-aggregator/pkg/cmd/server"
	"k8s.io/kube-aggregator/pkg/generated/openapi"
)

func main() {
	opts := server.NewDefaultOptions(os.Stdout, os.Stderr)
	endpointRouting := false
	cmd := &cobra.Command{
		Use:   "kube-aggregator",
		Short: "k8s.io/kube-aggregator's API aggregator, with the OpenAPI v3 config its main omits",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return opts.ServerRunOptions.ComponentGlobalsRegistry.Set()
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := opts.Complete(); err != nil {
				return err
			}
			if err := opts.Validate(args); err != nil {
				return err
			}
			return run(c.Context(), opts, endpointRouting)
		},
	}
	cmd.SetContext(genericapiserver.SetupSignalContext())
	opts.AddFlags(cmd.Flags())
	cmd.Flags().BoolVar(&endpointRouting, "enable-aggregator-routing", false,
		"proxy to an endpoint of the APIService's Service (EndpointSlices) instead of its cluster IP")
	os.Exit(cli.Run(cmd))
}

func run(ctx context.Context, o *server.AggregatorOptions, endpointRouting bool) error {
	if o.ProxyClientCertFile == "" || o.ProxyClientKeyFile == "" {
		return errors.New("--proxy-client-cert-file and --proxy-client-key-file are required")
	}
	if err := o.RecommendedOptions.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, nil); err != nil {
		return err
	}
	cfg := genericapiserver.NewRecommendedConfig(aggregatorscheme.Codecs)
	namer := openapinamer.NewDefinitionNamer(aggregatorscheme.Scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title = "kube-aggregator"
	// What upstream's main leaves nil.
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title = "kube-aggregator"
	// The aggregator serves its own merged /openapi documents.
	cfg.SkipOpenAPIInstallation = true
	if err := o.ServerRunOptions.ApplyTo(&cfg.Config); err != nil {
		return err
	}
	if err := o.RecommendedOptions.ApplyTo(cfg); err != nil {
		return err
	}
	if err := o.APIEnablement.ApplyTo(&cfg.Config, apiserver.DefaultAPIResourceConfigSource(), aggregatorscheme.Scheme); err != nil {
		return err
	}
	cfg.LongRunningFunc = filters.BasicLongRunningRequestCheck(
		sets.NewString("watch", "proxy"), sets.NewString("attach", "exec", "proxy", "log", "portforward"))

	services := cfg.SharedInformerFactory.Core().V1().Services().Lister()
	resolver := apiserver.NewClusterIPServiceResolver(services)
	if endpointRouting {
		slices, err := proxy.NewEndpointSliceIndexerGetter(cfg.SharedInformerFactory.Discovery().V1().EndpointSlices())
		if err != nil {
			return err
		}
		resolver = apiserver.NewEndpointServiceResolver(services, slices)
	}
	agg := apiserver.Config{
		GenericConfig: cfg,
		ExtraConfig: apiserver.ExtraConfig{
			ServiceResolver:     resolver,
			ProxyClientCertFile: o.ProxyClientCertFile,
			ProxyClientKeyFile:  o.ProxyClientKeyFile,
		},
	}
	s, err := agg.Complete().NewWithDelegate(genericapiserver.NewEmptyDelegate())
	if err != nil {
		return err
	}
	prepared, err := s.PrepareRun()
	if err != nil {
		return err
	}
	return prepared.Run(ctx)
}
