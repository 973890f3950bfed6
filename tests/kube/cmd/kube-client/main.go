// kube-client is the client-go v0.37.2 program of the real_kube:: suites: it talks to the server
// of a kubeconfig (apiagg or kube-apiserver) as controllers and kubectl do, and prints what it
// saw as JSON lines on stdout, one object each with an "event" field, for the Rust tests to
// assert on (tests/tests/e2e/real_kube/client_go.rs).
//
//	kube-client informer  --kubeconfig F --namespace NS [--seconds N]
//	kube-client discovery --kubeconfig F [--group G --kind K --resource R]
//	                      [--until-version V [--seconds N]]
//
// Every HTTP exchange is reported as a "request" line (method, path, query, Accept, status,
// Content-Type), so a test can tell a streaming list from a list and aggregated discovery from
// the legacy walk. Errors are "error" lines; the exit code is 1 after one.
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

// emit prints one JSON line: {"event": event, ...fields}.
func emit(event string, fields map[string]any) {
	line := map[string]any{"event": event}
	for k, v := range fields {
		line[k] = v
	}
	out.Lock()
	defer out.Unlock()
	_ = out.enc.Encode(line)
}

// fail prints an "error" line and exits 1.
func fail(what string, err error) {
	emit("error", map[string]any{"what": what, "error": err.Error()})
	os.Exit(1)
}

// quiet stops the recorder's lines (while discovery is polled).
var quiet atomic.Bool

// recorder reports every exchange of a client as a "request" line once its answer's head is in.
type recorder struct{ next http.RoundTripper }

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	fields := map[string]any{
		"method": req.Method, "path": req.URL.Path, "query": req.URL.RawQuery,
		"accept": req.Header.Get("Accept"),
	}
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		fields["error"] = err.Error()
	} else {
		fields["status"] = resp.StatusCode
		fields["contentType"] = resp.Header.Get("Content-Type")
	}
	if !quiet.Load() {
		emit("request", fields)
	}
	return resp, err
}

// config reads the kubeconfig and wraps its transport in a recorder.
func config(path string) *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		fail("kubeconfig", err)
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return recorder{next: rt} })
	return cfg
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kube-client informer|discovery --kubeconfig FILE ...")
		os.Exit(2)
	}
	began := time.Now()
	switch os.Args[1] {
	case "informer":
		informer(os.Args[2:], began)
	case "discovery":
		discover(os.Args[2:], began)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}
