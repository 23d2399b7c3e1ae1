package main

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const kubernetesDir = "../../deploy/kubernetes"

// decodeManifest reads one manifest of deploy/kubernetes into its API type
// strictly: a field the type does not have (a typo, a field at the wrong
// level, in another case) or a value of the wrong type fails, as the API
// server would refuse it.
func decodeManifest(t *testing.T, name string, into any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(kubernetesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		t.Fatalf("deploy/kubernetes/%s: %v", name, err)
	}
	// The API server's own decoder: field names match case-sensitively
	// (encoding/json would take readOnlyRootFileSystem), and unknown or
	// duplicate fields are errors.
	strict, err := kjson.UnmarshalStrict(doc, into)
	if err = errors.Join(append(strict, err)...); err != nil {
		t.Fatalf("deploy/kubernetes/%s: %v", name, err)
	}
}

// kubeManifests are the checked-in manifests, decoded.
type kubeManifests struct {
	config  corev1.ConfigMap
	worker  appsv1.Deployment
	migrate batchv1.Job
	pdb     policyv1.PodDisruptionBudget
	service corev1.Service
}

func readKubeManifests(t *testing.T) kubeManifests {
	t.Helper()
	var m kubeManifests
	decodeManifest(t, "configmap.yaml", &m.config)
	decodeManifest(t, "worker.yaml", &m.worker)
	decodeManifest(t, "migrate-job.yaml", &m.migrate)
	decodeManifest(t, "pdb.yaml", &m.pdb)
	decodeManifest(t, "service.yaml", &m.service)
	entries, err := os.ReadDir(kubernetesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); !slices.Contains([]string{"configmap.yaml", "worker.yaml", "migrate-job.yaml", "pdb.yaml", "service.yaml"}, n) {
			t.Errorf("deploy/kubernetes/%s is not checked by this test", n)
		}
	}
	return m
}

// podEnv is the environment a container of the manifests starts with
// (the ConfigMap it names, then its own env, which wins), and the
// configuration the worker loads from it: each *_FILE path under a
// mounted secret is answered by a file written in a temporary directory,
// as the kubelet would mount it.
func podEnv(t *testing.T, cm corev1.ConfigMap, pod corev1.PodSpec) (map[string]string, Config) {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil || from.ConfigMapRef.Name != cm.Name {
			t.Fatalf("%s: envFrom %+v is not the ConfigMap %q", c.Name, from, cm.Name)
		}
		for k, v := range cm.Data {
			env[k] = v
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("%s: %s comes from valueFrom: secrets are files (%s_FILE), never environment values", c.Name, e.Name, e.Name)
		}
		env[e.Name] = e.Value
	}

	secretDirs := map[string]string{} // mount path → secret name
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				secretDirs[vm.MountPath] = v.Secret.SecretName
			}
		}
	}
	files := t.TempDir()
	lookupEnv := map[string]string{}
	for k, v := range env {
		lookupEnv[k] = v
		name, ok := strings.CutSuffix(k, "_FILE")
		if !ok {
			continue
		}
		if !slices.Contains(fileVars, name) {
			t.Errorf("%s: %s is set but the worker reads no %s from a file", c.Name, k, name)
		}
		if _, mounted := secretDirs[filepath.Dir(v)]; !mounted {
			t.Errorf("%s: %s=%s is not in a mounted secret (mounted: %v)", c.Name, k, v, secretDirs)
		}
		local := filepath.Join(files, filepath.Base(v))
		value := "a-secret"
		if name == "DATABASE_URL" {
			value = "postgres://postbox@postgres:5432/postbox?sslmode=require"
		}
		if err := os.WriteFile(local, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		lookupEnv[k] = local
	}
	cfg, err := LoadConfig(func(k string) (string, bool) { v, ok := lookupEnv[k]; return v, ok })
	if err != nil {
		t.Fatalf("%s: the worker refuses the manifests' configuration: %v", c.Name, err)
	}
	return env, cfg
}

// TestKubernetesManifests checks deploy/kubernetes where no cluster runs:
// each manifest decodes strictly into its API type; the worker and the
// migration Job run one pinned image with a configuration the worker
// accepts as production, secrets from mounted files; the probes ask the
// routes the worker serves on the port it listens on; the grace period
// covers the whole drain; and the selectors pick the worker's pods.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	m := readKubeManifests(t)
	pod := m.worker.Spec.Template.Spec
	worker := pod.Containers[0]
	job := m.migrate.Spec.Template.Spec

	env, cfg := podEnv(t, m.config, pod)
	jobEnv, _ := podEnv(t, m.config, job)
	if !cfg.Production() {
		t.Errorf("APP_ENV=%q: the manifests are for production", cfg.AppEnv)
	}
	known := knownVariables()
	for k := range env {
		if !slices.Contains(known, strings.TrimSuffix(k, "_FILE")) {
			t.Errorf("%s is set but the worker does not read it", k)
		}
	}
	if !maps.Equal(env, jobEnv) {
		t.Errorf("the migration Job's environment differs from the worker's:\n job    %v\n worker %v", jobEnv, env)
	}

	pinned := regexp.MustCompile(`^[\w./-]+:v\d+\.\d+\.\d+[\w.-]*(@sha256:[0-9a-f]{64})?$`)
	if !pinned.MatchString(worker.Image) {
		t.Errorf("worker image %q is not pinned to a release tag", worker.Image)
	}
	if job.Containers[0].Image != worker.Image {
		t.Errorf("the Job runs %q, the worker %q: migrations must come from the worker's release", job.Containers[0].Image, worker.Image)
	}
	if got := strings.Join(worker.Args, " "); got != "run" {
		t.Errorf("worker args %q, want run", got)
	}
	if got := strings.Join(job.Containers[0].Args, " "); got != "migrate up" {
		t.Errorf("Job args %q, want migrate up", got)
	}
	if job.RestartPolicy != corev1.RestartPolicyNever && job.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("Job restartPolicy %q", job.RestartPolicy)
	}

	// The probes: routes the server registers, on the port HTTP_ADDR listens on.
	server, err := os.ReadFile("server.go")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(cfg.HTTPAddr, ":")
	for name, p := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"liveness": {worker.LivenessProbe, "/healthz"}, "readiness": {worker.ReadinessProbe, "/readyz"}, "startup": {worker.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s httpGet probe", name)
			continue
		}
		if got := p.probe.HTTPGet.Path; got != p.path || !strings.Contains(string(server), `"GET `+got+`"`) {
			t.Errorf("%s probe asks %q: want %s, a route server.go serves", name, got, p.path)
		}
		if got := probePort(worker, p.probe.HTTPGet.Port); got != port {
			t.Errorf("%s probe asks port %s, HTTP_ADDR listens on %s", name, got, port)
		}
	}

	// The grace period covers the drain and what shutdown does after it.
	drain := cfg.ShutdownTimeout + hardStopTimeout + httpShutdownTimeout
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < drain {
		t.Errorf("terminationGracePeriodSeconds %v is shorter than the drain: SHUTDOWN_TIMEOUT %s + hard stop %s + HTTP close %s = %s",
			g, cfg.ShutdownTimeout, hardStopTimeout, httpShutdownTimeout, drain)
	}

	labels := m.worker.Spec.Template.Labels
	for what, sel := range map[string]map[string]string{
		"Deployment selector": m.worker.Spec.Selector.MatchLabels,
		"PodDisruptionBudget": m.pdb.Spec.Selector.MatchLabels,
		"Service":             m.service.Spec.Selector,
	} {
		if len(sel) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, which the worker's pods do not carry", what, k, v)
			}
		}
	}
	if u := m.pdb.Spec.MaxUnavailable; u == nil && m.pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
}

// probePort is the number a probe's port names: itself, or the
// container port of that name.
func probePort(c corev1.Container, p intstr.IntOrString) string {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal {
			return strconv.Itoa(int(cp.ContainerPort))
		}
	}
	return p.String()
}
