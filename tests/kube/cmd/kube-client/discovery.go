package main

import (
	"flag"
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// discover does what kubectl and controllers do before they touch a resource: discovery
// (aggregated, the v2 Accept first: client-go's default), then a RESTMapper lookup of the
// resource by its plural name alone and of its kind. Lines: "group" (the group's versions and
// preferred version), "resources" (per group-version of the group: each resource as clients
// read it, sorted by name), "resource-for" and "mapping" (the RESTMapper's answers), "done".
func discover(args []string, began time.Time) {
	flags := flag.NewFlagSet("discovery", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the server")
	group := flags.String("group", "wardle.example.com", "the group to report")
	kind := flags.String("kind", "Flunder", "a kind of the group to map")
	resource := flags.String("resource", "flunders", "a resource of the group to map")
	until := flags.String("until-version", "", "then poll the RESTMapper until it maps the kind in this version")
	seconds := flags.Int("seconds", 30, "how long to poll")
	_ = flags.Parse(args)

	client, err := discovery.NewDiscoveryClientForConfig(config(*kubeconfig))
	if err != nil {
		fail("client", err)
	}
	groups, lists, err := client.ServerGroupsAndResources()
	if err != nil {
		// A group whose discovery failed is reported; the others are still there.
		emit("discovery-failed", map[string]any{"error": err.Error()})
	}
	emit("groups", map[string]any{"count": len(groups)})
	for _, g := range groups {
		if g.Name != *group {
			continue
		}
		versions := []string{}
		for _, v := range g.Versions {
			versions = append(versions, v.GroupVersion)
		}
		emit("group", map[string]any{"name": g.Name, "versions": versions,
			"preferred": g.PreferredVersion.GroupVersion})
	}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil || gv.Group != *group {
			continue
		}
		emit("resources", map[string]any{"groupVersion": list.GroupVersion,
			"resources": resources(list.APIResources)})
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client))
	gvr, err := mapper.ResourceFor(schema.GroupVersionResource{Resource: *resource})
	if err != nil {
		emit("resource-for", map[string]any{"resource": *resource, "error": err.Error()})
	} else {
		emit("resource-for", map[string]any{"resource": *resource, "group": gvr.Group,
			"version": gvr.Version, "plural": gvr.Resource})
	}
	mapping, err := mapper.RESTMapping(schema.GroupKind{Group: *group, Kind: *kind})
	if err != nil {
		emit("mapping", map[string]any{"kind": *kind, "error": err.Error()})
	} else {
		emit("mapping", map[string]any{"kind": *kind,
			"gvk":   mapping.GroupVersionKind.String(),
			"gvr":   mapping.Resource.String(),
			"scope": string(mapping.Scope.Name())})
	}
	if *until != "" {
		poll(mapper, schema.GroupKind{Group: *group, Kind: *kind}, *until, *seconds)
	}
	emit("done", map[string]any{"ms": time.Since(began).Milliseconds()})
}

// poll does what a controller does on a kind it cannot map yet: resets the RESTMapper (a new
// discovery) and asks again, every 100 ms, until it maps `kind` in `version` ("found", after
// how long and how many discoveries) or `seconds` pass ("error"). Its requests are not reported.
func poll(mapper *restmapper.DeferredDiscoveryRESTMapper, kind schema.GroupKind, version string, seconds int) {
	quiet.Store(true)
	defer quiet.Store(false)
	emit("waiting", map[string]any{"kind": kind.String(), "version": version})
	start := time.Now()
	for attempts := 1; time.Since(start) < time.Duration(seconds)*time.Second; attempts++ {
		mapper.Reset()
		if m, err := mapper.RESTMapping(kind, version); err == nil {
			emit("found", map[string]any{"gvr": m.Resource.String(), "attempts": attempts,
				"ms": time.Since(start).Milliseconds()})
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	fail("until-version", fmt.Errorf("%s in %s not mapped in %d s", kind, version, seconds))
}

// resources: what clients read of each resource, sorted by name.
func resources(list []metav1.APIResource) []map[string]any {
	read := []map[string]any{}
	for _, r := range list {
		read = append(read, map[string]any{
			"name": r.Name, "singularName": r.SingularName, "namespaced": r.Namespaced,
			"kind": r.Kind, "verbs": []string(r.Verbs), "shortNames": r.ShortNames,
			"categories": r.Categories, "group": r.Group, "version": r.Version,
		})
	}
	sort.Slice(read, func(i, j int) bool { return read[i]["name"].(string) < read[j]["name"].(string) })
	return read
}
