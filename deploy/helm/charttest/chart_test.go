// Package charttest renders relay's Helm chart (deploy/helm/relay) with
// each of its values profiles and checks the manifests for what matters
// when no cluster is at hand to run them: the routes of an embedded NATS
// cluster list every peer, the probes reach /healthz and /readyz where
// relay serves them, the pods run as non-root on a read-only root, the
// data directory is a volume, and Secrets are referenced, never inlined.
//
// It runs Helm, so it runs only when RELAY_HELM names a helm binary
// ('make chart-test' builds one and sets it); 'make test' skips it.
package charttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../relay"
	release   = "rel"
	namespace = "hooks"
	fullname  = "rel-relay"
	userID    = 65532
)

// profile is a values file of ci/ and what it should come out as.
type profile struct {
	file     string
	replicas int32
	cluster  bool // embedded servers form a NATS cluster
	external bool // stateless relays on an external NATS
	api      bool
	redis    bool
	monitor  bool // a ServiceMonitor
}

var profiles = []profile{
	{file: "single-values.yaml", replicas: 1},
	{file: "cluster-values.yaml", replicas: 3, cluster: true, api: true, monitor: true},
	{file: "cluster5-values.yaml", replicas: 5, cluster: true},
	{file: "external-nats-values.yaml", replicas: 4, external: true, api: true},
	{file: "with-redis-values.yaml", replicas: 3, cluster: true, redis: true},
}

// The Secrets the profiles name, and the keys they read.
const (
	secretKeySecret = "relay-secret-key"
	natsSecret      = "relay-nats"
	redisSecret     = "relay-redis"
	clusterSecret   = "relay-cluster"
)

func helm(t *testing.T) string {
	t.Helper()
	h := os.Getenv("RELAY_HELM")
	if h == "" {
		t.Skip("RELAY_HELM is not set: 'make chart-test' builds Helm and runs this test")
	}
	return h
}

// render runs helm template with the given values files and --set flags.
func render(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm template: %w: %s", err, errb.String())
	}
	return out.String(), nil
}

// manifests is a rendered chart, by kind and name, each object's YAML.
type manifests map[string]map[string][]byte

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func parse(t *testing.T, out string) manifests {
	t.Helper()
	m := manifests{}
	for _, doc := range docSep.Split(out, -1) {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &head))
		if head.Kind == "" {
			continue
		}
		if m[head.Kind] == nil {
			m[head.Kind] = map[string][]byte{}
		}
		require.NotContains(t, m[head.Kind], head.Metadata.Name, "two %s named %s", head.Kind, head.Metadata.Name)
		m[head.Kind][head.Metadata.Name] = []byte(doc)
	}
	return m
}

// decode reads an object as the API server does, case-sensitively, and
// strictly: a field the API type does not have (a misspelt key in a
// template, readOnlyRootFileSystem) is an error, which helm lint does not
// catch and which the API server would drop or refuse.
func decode[T any](t *testing.T, m manifests, kind, name string) *T {
	t.Helper()
	doc, ok := m[kind][name]
	require.True(t, ok, "no %s named %s; rendered: %v", kind, name, kinds(m))
	js, err := yaml.YAMLToJSON(doc)
	require.NoError(t, err, "%s %s", kind, name)
	var v T
	strict, err := kjson.UnmarshalStrict(js, &v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	require.NoError(t, err, "%s %s", kind, name)
	require.Empty(t, strict, "%s %s has fields its API type does not", kind, name)
	return &v
}

func kinds(m manifests) []string {
	var ks []string
	for k, names := range m {
		for n := range names {
			ks = append(ks, k+"/"+n)
		}
	}
	slices.Sort(ks)
	return ks
}

// workload is what the StatefulSet and the Deployment have in common.
type workload struct {
	replicas int32
	labels   map[string]string
	pod      corev1.PodSpec
	claims   []corev1.PersistentVolumeClaim
}

func TestProfiles(t *testing.T) {
	helm(t)
	for _, p := range profiles {
		t.Run(strings.TrimSuffix(p.file, "-values.yaml"), func(t *testing.T) {
			t.Parallel()
			out, err := render(t, "-f", filepath.Join(chartDir, "ci", p.file))
			require.NoError(t, err)
			m := parse(t, out)
			require.NotContains(t, m, "Secret", "the chart renders no Secret: it references the operator's")

			var w workload
			if p.external {
				require.NotContains(t, m, "StatefulSet")
				d := decode[appsv1.Deployment](t, m, "Deployment", fullname)
				require.NotNil(t, d.Spec.Replicas)
				w = workload{*d.Spec.Replicas, d.Spec.Template.Labels, d.Spec.Template.Spec, nil}
				require.Equal(t, d.Spec.Selector.MatchLabels, subset(d.Spec.Selector.MatchLabels, w.labels))
			} else {
				require.NotContains(t, m, "Deployment")
				s := decode[appsv1.StatefulSet](t, m, "StatefulSet", fullname)
				require.NotNil(t, s.Spec.Replicas)
				w = workload{*s.Spec.Replicas, s.Spec.Template.Labels, s.Spec.Template.Spec, s.Spec.VolumeClaimTemplates}
				require.Equal(t, s.Spec.Selector.MatchLabels, subset(s.Spec.Selector.MatchLabels, w.labels))
				checkHeadless(t, m, s, p)
			}
			require.Equal(t, p.replicas, w.replicas, "replicas")
			require.Len(t, w.pod.Containers, 1)
			c := w.pod.Containers[0]
			require.Equal(t, "run", c.Args[0], "the image's entrypoint is relay: args start with the command")

			checkSecurity(t, w.pod, c)
			checkProbes(t, c)
			checkDataDir(t, w, c, p)
			checkCluster(t, c, p)
			checkSecrets(t, w.pod, c, p)
			checkServices(t, m, w, c, p)
			checkPDB(t, m, w, p)

			sg := flag(t, c.Args, "--shutdown-grace")
			grace, err := strconv.Atoi(strings.TrimSuffix(sg, "s"))
			require.NoError(t, err, "--shutdown-grace %q", sg)
			require.NotNil(t, w.pod.TerminationGracePeriodSeconds)
			require.Greater(t, *w.pod.TerminationGracePeriodSeconds, int64(grace), "Kubernetes must give relay its --shutdown-grace before SIGKILL")
		})
	}
}

// subset returns the entries of labels whose keys are in sel.
func subset(sel, labels map[string]string) map[string]string {
	out := map[string]string{}
	for k := range sel {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

func selects(t *testing.T, sel, podLabels map[string]string, what string) {
	t.Helper()
	require.NotEmpty(t, sel, "%s selects nothing", what)
	require.Equal(t, sel, subset(sel, podLabels), "%s does not select relay's pods", what)
}

// flags returns the values of --name=value in args.
func flags(args []string, name string) []string {
	var vs []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

func flag(t *testing.T, args []string, name string) string {
	t.Helper()
	vs := flags(args, name)
	require.Len(t, vs, 1, "%s in %v", name, args)
	return vs[0]
}

func port(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	require.Failf(t, "no port", "the container has no port named %q: %v", name, c.Ports)
	return 0
}

func checkSecurity(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	ps := pod.SecurityContext
	require.NotNil(t, ps)
	require.Equal(t, ptr(true), ps.RunAsNonRoot)
	require.Equal(t, ptr(int64(userID)), ps.RunAsUser, "the image's user")
	require.Equal(t, ptr(int64(userID)), ps.FSGroup, "the volumes must be writable by the image's user")
	s := c.SecurityContext
	require.NotNil(t, s)
	require.Equal(t, ptr(true), s.RunAsNonRoot)
	require.Equal(t, ptr(int64(userID)), s.RunAsUser)
	require.Equal(t, ptr(true), s.ReadOnlyRootFilesystem)
	require.Equal(t, ptr(false), s.AllowPrivilegeEscalation)
	require.NotNil(t, s.Capabilities)
	require.Equal(t, []corev1.Capability{"ALL"}, s.Capabilities.Drop)
	require.Empty(t, s.Capabilities.Add)
	require.False(t, s.Privileged != nil && *s.Privileged)
	require.False(t, pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken, "relay needs no Kubernetes API token")
	// A read-only root leaves /tmp unwritable unless it is a volume.
	require.Equal(t, "tmp", mountAt(t, c, "/tmp").Name)
	require.NotNil(t, volume(t, pod, "tmp").EmptyDir)
}

// checkProbes: /healthz and /readyz are served on --metrics-addr (not the
// API's listener), which must listen beyond loopback for the kubelet.
func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	addr := flag(t, c.Args, "--metrics-addr")
	host, p, ok := strings.Cut(addr, ":")
	require.True(t, ok, "--metrics-addr %q", addr)
	require.NotContains(t, []string{"127.0.0.1", "localhost", "::1", "[::1]"}, host, "the kubelet cannot reach a loopback --metrics-addr")
	metrics := port(t, c, "metrics")
	require.Equal(t, strconv.Itoa(int(metrics)), p, "the port named metrics is --metrics-addr's")
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{
		{"startup", c.StartupProbe, "/healthz"},
		{"liveness", c.LivenessProbe, "/healthz"},
		{"readiness", c.ReadinessProbe, "/readyz"},
	} {
		require.NotNil(t, pr.probe, "%s probe", pr.what)
		g := pr.probe.HTTPGet
		require.NotNil(t, g, "%s probe is an HTTP GET", pr.what)
		require.Equal(t, pr.path, g.Path, "%s probe's path", pr.what)
		if g.Port.StrVal != "" {
			require.Equal(t, metrics, port(t, c, g.Port.StrVal), "%s probe's port", pr.what)
		} else {
			require.Equal(t, metrics, g.Port.IntVal, "%s probe's port", pr.what)
		}
	}
}

func checkDataDir(t *testing.T, w workload, c corev1.Container, p profile) {
	t.Helper()
	if p.external {
		require.Empty(t, flags(c.Args, "--data-dir"), "no embedded server, no data directory")
		require.Empty(t, w.claims)
		return
	}
	dir := flag(t, c.Args, "--data-dir")
	m := mountAt(t, c, dir)
	require.False(t, m.ReadOnly)
	var claims []string
	for _, cl := range w.claims {
		claims = append(claims, cl.Name)
	}
	require.Contains(t, claims, m.Name, "the data directory %s is a PVC of each pod", dir)
}

func checkCluster(t *testing.T, c corev1.Container, p profile) {
	t.Helper()
	if !p.cluster {
		require.Empty(t, flags(c.Args, "--routes"))
		require.Empty(t, flags(c.Args, "--cluster-name"))
		if p.external {
			require.Equal(t, "3", flag(t, c.Args, "--replicas"), "the profile's NATS is a cluster: R3 streams")
		} else {
			require.Empty(t, flags(c.Args, "--replicas"), "one server: R1 streams")
		}
		return
	}
	require.Equal(t, "3", flag(t, c.Args, "--replicas"), "R3 streams")
	require.NotEmpty(t, flag(t, c.Args, "--cluster-name"))
	listen := flag(t, c.Args, "--cluster-listen")
	require.True(t, strings.HasPrefix(listen, "0.0.0.0:"), "the peers reach --cluster-listen %s", listen)
	cport := port(t, c, "cluster")
	require.Equal(t, fmt.Sprintf("0.0.0.0:%d", cport), listen)
	// Each server is named after its pod.
	require.Equal(t, "$(POD_NAME)", flag(t, c.Args, "--server-name"))
	pn := env(t, c, "POD_NAME")
	require.NotNil(t, pn.ValueFrom)
	require.NotNil(t, pn.ValueFrom.FieldRef)
	require.Equal(t, "metadata.name", pn.ValueFrom.FieldRef.FieldPath)
	var want []string
	for i := range int(p.replicas) {
		want = append(want, fmt.Sprintf("nats://%s-%d.%s-headless.%s.svc.cluster.local:%d", fullname, i, fullname, namespace, cport))
	}
	require.ElementsMatch(t, want, flags(c.Args, "--routes"), "the routes list every peer by its stable name")
}

func checkHeadless(t *testing.T, m manifests, s *appsv1.StatefulSet, p profile) {
	t.Helper()
	h := decode[corev1.Service](t, m, "Service", s.Spec.ServiceName)
	require.Equal(t, corev1.ClusterIPNone, h.Spec.ClusterIP, "the StatefulSet's Service is headless")
	selects(t, h.Spec.Selector, s.Spec.Template.Labels, "the headless Service")
	if p.cluster {
		require.True(t, h.Spec.PublishNotReadyAddresses, "peers must resolve each other before they are ready: readiness needs the cluster")
		require.Equal(t, appsv1.ParallelPodManagement, s.Spec.PodManagementPolicy, "an ordered start waits for pod 0's readiness, which waits for a quorum")
		var ports []string
		for _, sp := range h.Spec.Ports {
			ports = append(ports, sp.TargetPort.String())
		}
		require.Contains(t, ports, "cluster")
	}
}

// sensitive are the settings that carry a credential: never a literal
// value, never a flag.
var sensitive = []string{"RELAY_SECRET_KEY", "RELAY_PREVIOUS_SECRET_KEY", "RELAY_NATS_URL", "RELAY_NATS_USER", "RELAY_NATS_PASSWORD", "RELAY_NATS_TOKEN", "RELAY_REDIS_URL", "RELAY_CLUSTER_SECRET"}

func checkSecrets(t *testing.T, pod corev1.PodSpec, c corev1.Container, p profile) {
	t.Helper()
	for _, a := range c.Args {
		for _, f := range []string{"--secret-key", "--previous-secret-key", "--nats-password", "--nats-token", "--nats-user", "--redis-url", "--nats-url", "--cluster-secret"} {
			require.False(t, a == f || strings.HasPrefix(a, f+"="), "%s given as a flag: it would show in the pod's spec", f)
		}
	}
	for _, e := range c.Env {
		if slices.Contains(sensitive, e.Name) {
			require.Empty(t, e.Value, "%s is inlined", e.Name)
			require.NotNil(t, e.ValueFrom, "%s", e.Name)
			require.NotNil(t, e.ValueFrom.SecretKeyRef, "%s comes from a Secret", e.Name)
		}
	}
	// The secret key: a file of the operator's Secret.
	file := env(t, c, "RELAY_SECRET_KEY_FILE").Value
	secretFile(t, pod, c, file, secretKeySecret, "key")
	if p.redis {
		prev := env(t, c, "RELAY_PREVIOUS_SECRET_KEY_FILE").Value
		secretFile(t, pod, c, prev, secretKeySecret, "previous")
		secretRef(t, c, "RELAY_REDIS_URL", redisSecret, "url")
	} else {
		noEnv(t, c, "RELAY_REDIS_URL")
	}
	if p.cluster {
		secretRef(t, c, "RELAY_CLUSTER_SECRET", clusterSecret, "secret")
	} else {
		noEnv(t, c, "RELAY_CLUSTER_SECRET")
	}
	if p.external {
		secretRef(t, c, "RELAY_NATS_URL", natsSecret, "url")
		secretRef(t, c, "RELAY_NATS_USER", natsSecret, "user")
		secretRef(t, c, "RELAY_NATS_PASSWORD", natsSecret, "password")
	} else {
		noEnv(t, c, "RELAY_NATS_URL")
	}
}

func secretRef(t *testing.T, c corev1.Container, name, secret, key string) {
	t.Helper()
	e := env(t, c, name)
	require.NotNil(t, e.ValueFrom, name)
	r := e.ValueFrom.SecretKeyRef
	require.NotNil(t, r, "%s comes from a Secret", name)
	require.Equal(t, secret, r.Name, name)
	require.Equal(t, key, r.Key, name)
}

// secretFile checks that path is the file of key in secret, mounted.
func secretFile(t *testing.T, pod corev1.PodSpec, c corev1.Container, path, secret, key string) {
	t.Helper()
	require.NotEmpty(t, path)
	dir, file := filepath.Split(path)
	m := mountAt(t, c, filepath.Clean(dir))
	require.True(t, m.ReadOnly)
	v := volume(t, pod, m.Name)
	require.NotNil(t, v.Secret, "%s is a Secret's volume", dir)
	require.Equal(t, secret, v.Secret.SecretName)
	require.Contains(t, v.Secret.Items, corev1.KeyToPath{Key: key, Path: file}, "%s is the Secret's key %s", path, key)
	require.NotNil(t, v.Secret.DefaultMode)
	require.Equal(t, int32(0o440), *v.Secret.DefaultMode, "readable by the fsGroup, not by others")
}

func env(t *testing.T, c corev1.Container, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e
		}
	}
	require.Failf(t, "no env", "the container has no %s", name)
	return corev1.EnvVar{}
}

func noEnv(t *testing.T, c corev1.Container, name string) {
	t.Helper()
	for _, e := range c.Env {
		require.NotEqual(t, name, e.Name)
	}
}

func mountAt(t *testing.T, c corev1.Container, path string) corev1.VolumeMount {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) == filepath.Clean(path) {
			return m
		}
	}
	require.Failf(t, "no mount", "nothing is mounted at %s: %v", path, c.VolumeMounts)
	return corev1.VolumeMount{}
}

func volume(t *testing.T, pod corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Name == name {
			return v
		}
	}
	require.Failf(t, "no volume", "the pod has no volume %s", name)
	return corev1.Volume{}
}

func checkServices(t *testing.T, m manifests, w workload, c corev1.Container, p profile) {
	t.Helper()
	ms := decode[corev1.Service](t, m, "Service", fullname+"-metrics")
	selects(t, ms.Spec.Selector, w.labels, "the metrics Service")
	require.Len(t, ms.Spec.Ports, 1)
	require.Equal(t, port(t, c, ms.Spec.Ports[0].TargetPort.StrVal), port(t, c, "metrics"))
	if p.api {
		addr := flag(t, c.Args, "--api-addr")
		as := decode[corev1.Service](t, m, "Service", fullname)
		selects(t, as.Spec.Selector, w.labels, "the API Service")
		require.Len(t, as.Spec.Ports, 1)
		require.Equal(t, fmt.Sprintf("0.0.0.0:%d", port(t, c, as.Spec.Ports[0].TargetPort.StrVal)), addr, "the API Service reaches --api-addr")
	} else {
		require.Empty(t, flags(c.Args, "--api-addr"))
		require.NotContains(t, m["Service"], fullname, "no API Service without the API")
	}
	if p.monitor {
		var sm struct {
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Endpoints []struct {
					Port string `json:"port"`
					Path string `json:"path"`
				} `json:"endpoints"`
			} `json:"spec"`
		}
		doc, ok := m["ServiceMonitor"][fullname]
		require.True(t, ok, "a ServiceMonitor")
		require.NoError(t, yaml.Unmarshal(doc, &sm))
		selects(t, sm.Spec.Selector.MatchLabels, ms.Labels, "the ServiceMonitor")
		require.Len(t, sm.Spec.Endpoints, 1)
		require.Equal(t, ms.Spec.Ports[0].Name, sm.Spec.Endpoints[0].Port)
		require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
	} else {
		require.NotContains(t, m, "ServiceMonitor")
	}
}

func checkPDB(t *testing.T, m manifests, w workload, p profile) {
	t.Helper()
	pdb := decode[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", fullname)
	selects(t, pdb.Spec.Selector.MatchLabels, w.labels, "the PodDisruptionBudget")
	require.Nil(t, pdb.Spec.MinAvailable, "minAvailable with one pod would block every drain")
	require.NotNil(t, pdb.Spec.MaxUnavailable)
	maxUn := pdb.Spec.MaxUnavailable.IntValue()
	require.GreaterOrEqual(t, maxUn, 1, "a drain must be able to move a pod")
	if p.cluster {
		// R3 streams keep their quorum (2 of 3) only if at most one pod
		// is taken at a time, whichever pods hold a stream's replicas.
		require.Equal(t, 1, maxUn)
	}
	if p.external {
		require.Less(t, maxUn, int(w.replicas), "a drain must leave a relay running")
	}
}

// TestRefusesSettingsThatCannotWork: the chart fails to render, and says
// why, rather than render pods that cannot run.
func TestRefusesSettingsThatCannotWork(t *testing.T) {
	helm(t)
	for _, tc := range []struct {
		name string
		set  []string
		says string
	}{
		{"embedded server with 2 replicas", []string{"replicas=2"}, "cluster.enabled"},
		{"a cluster of 4", []string{"cluster.enabled=true", "cluster.replicas=4"}, "3 or 5"},
		{"a cluster and an external NATS", []string{"cluster.enabled=true", "externalNats.enabled=true", "externalNats.url=nats://n:4222"}, "exclude each other"},
		{"an external NATS without its URL", []string{"externalNats.enabled=true"}, "needs its URL"},
		{"credentials in externalNats.url", []string{"externalNats.enabled=true", "externalNats.url=nats://relay:hunter2@n:4222"}, "carries credentials"},
		{"a cluster's PDB taking 2", []string{"cluster.enabled=true", "podDisruptionBudget.maxUnavailable=2"}, "quorum"},
		{"a cluster without its routes' secret", []string{"cluster.enabled=true"}, "cluster.existingSecret: name a Secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := render(t, args...)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.says)
		})
	}
}

// TestDefaultsRender: the chart's own values.yaml (no profile) gives one
// pod with its embedded server.
func TestDefaultsRender(t *testing.T) {
	helm(t)
	out, err := render(t)
	require.NoError(t, err)
	m := parse(t, out)
	s := decode[appsv1.StatefulSet](t, m, "StatefulSet", fullname)
	require.Equal(t, ptr(int32(1)), s.Spec.Replicas)
	c := s.Spec.Template.Spec.Containers[0]
	checkSecurity(t, s.Spec.Template.Spec, c)
	checkProbes(t, c)
	require.Equal(t, "127.0.0.1:4222", flag(t, c.Args, "--listen"), "the embedded server's client port stays in the pod: it has no authentication")
	noEnv(t, c, "RELAY_SECRET_KEY_FILE")
}

func ptr[T any](v T) *T { return &v }
