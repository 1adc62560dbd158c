// hpd-otelcol: the OpenTelemetry Collector hpd's tests push profiles to.
//
// It is the collector built from its own Go modules with the smallest set of
// components those tests need: the core OTLP receiver (gRPC and HTTP) and
// contrib's file exporter, which writes what the receiver accepted as OTLP JSON,
// and contrib's bearertokenauth extension, so that a receiver can require a
// bearer token (the tests of hpd's push_headers_file).
// The profiles signal is still behind the feature gate service.profilesSupport;
// this binary turns it on before it reads its command line, so a pipeline of
// profiles is accepted without a flag.
package main

import (
	"fmt"
	"os"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/bearertokenauthextension"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/featuregate"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

const profilesGate = "service.profilesSupport"

func factories() (otelcol.Factories, error) {
	// The collector's own logs and metrics, as its configuration's service::telemetry says.
	f := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap(otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap(fileexporter.NewFactory()); err != nil {
		return f, err
	}
	// A receiver that requires a bearer token (the OTLP receiver's auth setting).
	if f.Extensions, err = otelcol.MakeFactoryMap(bearertokenauthextension.NewFactory()); err != nil {
		return f, err
	}
	return f, nil
}

func main() {
	if err := featuregate.GlobalRegistry().Set(profilesGate, true); err != nil {
		fmt.Fprintf(os.Stderr, "hpd-otelcol: cannot enable %s: %v\n", profilesGate, err)
		os.Exit(1)
	}
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "hpd-otelcol",
			Description: "OpenTelemetry Collector (OTLP receiver, file exporter) for hpd's tests",
			Version:     "0.161.0",
		},
		Factories: factories,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				// --config FILE is a file; ${NAME} in it is an environment variable.
				ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory(), envprovider.NewFactory()},
				DefaultScheme:     "env",
			},
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "hpd-otelcol: %v\n", err)
		os.Exit(1)
	}
}
