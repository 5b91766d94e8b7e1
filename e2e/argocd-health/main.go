// Command argocd-health evaluates the health of Kubernetes objects with Argo CD's own code,
// the way Argo CD's application controller does: the resource overrides are read from the
// argocd-cm ConfigMap of a real API server by Argo CD's settings manager
// (util/settings.SettingsManager.GetResourceOverrides, which parses the
// resource.customizations.health.<group_kind> keys), and each object is assessed by
// gitops-engine's health.GetResourceHealth with util/lua.ResourceHealthOverrides, the override
// the controller passes (controller/cache). Nothing here evaluates Lua itself.
//
// Usage:
//
//	kubectl get agenthook NAME -n NS -o json | argocd-health --kubeconfig K [--namespace argocd]
//
// Standard input holds one object or a List (kubectl get -o json of several); for each object
// one line of JSON is printed: {"kind","namespace","name","status","message"}; status ""
// means Argo CD assesses no health for that kind (no check, built in or configured). A script error
// is reported as Argo CD reports it (status Unknown, the error as message) and makes the exit
// status 1; bad input or an unreadable argocd-cm makes it 2.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	log "github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
)

// result is one evaluated object, as printed.
type result struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster that holds argocd-cm")
	namespace := flag.String("namespace", "argocd", "namespace of Argo CD (and of its argocd-cm)")
	flag.Parse()
	// The settings manager logs its informers' progress at info; keep stderr for problems.
	log.SetLevel(log.WarnLevel)
	code, err := run(*kubeconfig, *namespace, os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health:", err)
	}
	os.Exit(code)
}

// run reads the overrides from the cluster, the objects from in, and writes one result per
// object to out; it returns the exit status.
func run(kubeconfig, namespace string, in io.Reader, out io.Writer) (int, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return 2, fmt.Errorf("kubeconfig: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 2, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr := settings.NewSettingsManager(ctx, clientset, namespace)
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		return 2, fmt.Errorf("resource overrides from %s/argocd-cm: %w", namespace, err)
	}
	objects, err := readObjects(in)
	if err != nil {
		return 2, err
	}
	code := 0
	enc := json.NewEncoder(out)
	for _, obj := range objects {
		r := result{Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
		hs, err := health.GetResourceHealth(obj, lua.ResourceHealthOverrides(overrides))
		if err != nil {
			code = 1
		}
		if hs != nil {
			r.Status, r.Message = string(hs.Status), hs.Message
		}
		if err := enc.Encode(r); err != nil {
			return 2, err
		}
	}
	return code, nil
}

// readObjects decodes one object or a List of objects.
func readObjects(in io.Reader) ([]*unstructured.Unstructured, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("standard input is no Kubernetes object: %w", err)
	}
	if !obj.IsList() {
		return []*unstructured.Unstructured{obj}, nil
	}
	list, err := obj.ToList()
	if err != nil {
		return nil, err
	}
	objects := make([]*unstructured.Unstructured, 0, len(list.Items))
	for i := range list.Items {
		objects = append(objects, &list.Items[i])
	}
	if len(objects) == 0 {
		return nil, errors.New("the List on standard input is empty")
	}
	return objects, nil
}
