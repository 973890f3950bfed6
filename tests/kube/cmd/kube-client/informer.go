package main

import (
	"bufio"
	"context"
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"
	wardle "k8s.io/sample-apiserver/pkg/generated/clientset/versioned"
	"k8s.io/sample-apiserver/pkg/generated/informers/externalversions"
)

// informer runs a shared informer on the flunders of one namespace, as a controller built
// with client-go does: "start" (whether WatchListClient is on), "synced" (after how long, how
// many flunders), then "add", "update" and "delete" as they come, "watch-error" when the
// reflector fails. It ends when its standard input closes or after --seconds.
func informer(args []string, began time.Time) {
	flags := flag.NewFlagSet("informer", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the server")
	namespace := flags.String("namespace", "", "namespace of the flunders")
	seconds := flags.Int("seconds", 120, "end after this long")
	_ = flags.Parse(args)

	// client-go reads its feature gates from KUBE_FEATURE_<name> (the test sets
	// KUBE_FEATURE_WatchListClient=true; it is also 1.37's default).
	watchList := clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
	emit("start", map[string]any{"watchListClient": watchList})

	client, err := wardle.NewForConfig(config(*kubeconfig))
	if err != nil {
		fail("client", err)
	}
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0,
		externalversions.WithNamespace(*namespace))
	flunders := factory.Wardle().V1alpha1().Flunders().Informer()
	name := func(obj any) map[string]any {
		if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = gone.Obj
		}
		o, err := meta.Accessor(obj)
		if err != nil {
			return map[string]any{"error": err.Error()}
		}
		return map[string]any{"namespace": o.GetNamespace(), "name": o.GetName(),
			"resourceVersion": o.GetResourceVersion(), "uid": string(o.GetUID())}
	}
	_, err = flunders.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			fields := name(obj)
			fields["initial"] = initial
			emit("add", fields)
		},
		UpdateFunc: func(_, obj any) { emit("update", name(obj)) },
		DeleteFunc: func(obj any) { emit("delete", name(obj)) },
	})
	if err != nil {
		fail("handler", err)
	}
	_ = flunders.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		emit("watch-error", map[string]any{"error": err.Error()})
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*seconds)*time.Second)
	defer cancel()
	go func() {
		// The test ends the program by closing its standard input.
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		cancel()
	}()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), flunders.HasSynced) {
		emit("error", map[string]any{"what": "sync", "error": "the informer did not sync"})
		factory.Shutdown()
		os.Exit(1)
	}
	emit("synced", map[string]any{
		"ms":    time.Since(began).Milliseconds(),
		"items": len(flunders.GetStore().ListKeys()),
	})
	<-ctx.Done()
	factory.Shutdown()
	emit("end", map[string]any{"ms": time.Since(began).Milliseconds()})
}
