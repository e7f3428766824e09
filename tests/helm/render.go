// paci-helm-render renders a Helm chart the way `helm template` does, for the
// tests: no helm binary is packaged for Debian, but the libraries Helm's
// engine is built from are (text/template, Masterminds/sprig, sigs.k8s.io/yaml,
// xeipuuv/gojsonschema, which Helm 3 validates values.schema.json with).
//
// What it mirrors of Helm 3 (its template engine, chart utilities and manifest ordering):
//   - the chart: Chart.yaml (apiVersion v2, name and version required), values.yaml,
//     values.schema.json, templates/ (partials start with "_", NOTES.txt apart),
//     crds/, every other file as .Files (Get, GetBytes, Glob, AsConfig, AsSecrets,
//     Lines), .helmignore;
//   - values: -f files, then --set/--set-string, merged over values.yaml (a null
//     removes a default), then checked against values.schema.json with Helm's
//     wording ("values don't meet the specifications of the schema(s) ...");
//   - the functions: sprig's (less env and expandenv), toYaml, fromYaml,
//     fromYamlArray, toJson, fromJson, fromJsonArray, mustToYaml, mustToJson,
//     include, tpl, required, fail, lookup (always empty, as in `helm template`);
//   - .Release (Name, Namespace, Service "Helm", Revision, IsInstall, IsUpgrade),
//     .Chart (Chart.yaml's fields, capitalised), .Capabilities (KubeVersion,
//     APIVersions.Has), .Template (Name, BasePath), missingkey=zero and
//     "<no value>" removed;
//   - the output: every document of every template, empty ones dropped, each
//     parsed as YAML (a template that renders invalid YAML fails as Helm does:
//     "YAML parse error on paci/templates/x.yaml: ..."), sorted in Helm's install
//     order, each after "---" and "# Source: <chart>/templates/<file>".
//
// Build (Debian's packages, GOPATH mode, no network):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o paci-helm-render ./tests/helm
//
// Usage:
//
//	paci-helm-render [--name R] [--namespace NS] [-f values.yaml]... [--set k=v]...
//	    [--set-string k=v]... [--include-crds] [--notes] [--kube-version v1.32.0]
//	    [--api-versions group/version]... CHART_DIR
//
// --notes prints the rendered NOTES.txt instead of the manifests.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	// Debian ships sprig v3 at its v1 import path: GOPATH mode finds it there.
	"github.com/Masterminds/sprig"
	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	name, namespace, kubeVersion  string
	valueFiles, sets, setStrings  stringList
	apiVersions                   stringList
	includeCRDs, notes, isUpgrade bool
	revision                      int
	chartDir                      string
}

// ---------------------------------------------------------------------------
// The chart

type chart struct {
	dir       string
	metadata  map[string]any // Chart.yaml with Helm's Go field names
	values    map[string]any
	schema    []byte
	templates map[string]string // "templates/x.yaml" -> text
	crds      map[string][]byte // "crds/x.yaml" -> bytes
	files     files             // everything else
}

// Chart.yaml's keys as the fields of Helm's chart.Metadata, which templates see.
var metadataFields = map[string]string{
	"apiVersion": "APIVersion", "name": "Name", "version": "Version", "kubeVersion": "KubeVersion",
	"description": "Description", "type": "Type", "keywords": "Keywords", "home": "Home",
	"sources": "Sources", "dependencies": "Dependencies", "maintainers": "Maintainers",
	"icon": "Icon", "appVersion": "AppVersion", "deprecated": "Deprecated",
	"annotations": "Annotations",
}

// ignoreRules are .helmignore's patterns (the common subset: globs on the
// path or the base name, a trailing "/" for directories, "!" negations).
type ignoreRules []string

func (rules ignoreRules) ignored(rel string, dir bool) bool {
	out := false
	for _, rule := range rules {
		negate := strings.HasPrefix(rule, "!")
		pattern := strings.TrimPrefix(rule, "!")
		if strings.HasSuffix(pattern, "/") {
			if !dir {
				continue
			}
			pattern = strings.TrimSuffix(pattern, "/")
		}
		pattern = strings.TrimPrefix(pattern, "/")
		target := path.Base(rel)
		if strings.Contains(pattern, "/") {
			target = rel
		}
		if ok, _ := path.Match(pattern, target); ok {
			out = !negate
		}
	}
	return out
}

func loadChart(dir string) (*chart, error) {
	c := &chart{dir: dir, templates: map[string]string{}, crds: map[string][]byte{}, files: files{}}
	var rules ignoreRules
	if data, err := os.ReadFile(filepath.Join(dir, ".helmignore")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line != "" && !strings.HasPrefix(line, "#") {
				rules = append(rules, line)
			}
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		info, err := os.Stat(p) // follows links, as Helm's loader does
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if rules.ignored(rel, info.IsDir()) || rel == ".helmignore" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case rel == "Chart.yaml":
			raw := map[string]any{}
			if err := yaml.Unmarshal(data, &raw); err != nil {
				return fmt.Errorf("Chart.yaml: %w", err)
			}
			c.metadata = map[string]any{}
			for k, v := range raw {
				if field, ok := metadataFields[k]; ok {
					c.metadata[field] = v
				}
			}
		case rel == "values.yaml":
			c.values = map[string]any{}
			if err := yaml.Unmarshal(data, &c.values); err != nil {
				return fmt.Errorf("values.yaml: %w", err)
			}
			if c.values == nil {
				c.values = map[string]any{}
			}
		case rel == "values.schema.json":
			c.schema = data
		case strings.HasPrefix(rel, "templates/"):
			c.templates[rel] = string(data)
		case strings.HasPrefix(rel, "charts/"):
			return errors.New("subcharts (charts/) are not supported by this renderer")
		default:
			if strings.HasPrefix(rel, "crds/") {
				c.crds[rel] = data
			}
			c.files[rel] = data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if c.metadata == nil {
		return nil, fmt.Errorf("Chart.yaml file is missing")
	}
	if c.metadata["APIVersion"] != "v2" {
		return nil, fmt.Errorf("Chart.yaml: apiVersion must be v2, not %v", c.metadata["APIVersion"])
	}
	for _, field := range []string{"Name", "Version"} {
		if s, _ := c.metadata[field].(string); s == "" {
			return nil, fmt.Errorf("validation: chart.metadata.%s is required", strings.ToLower(field))
		}
	}
	if c.values == nil {
		c.values = map[string]any{}
	}
	return c, nil
}

// ---------------------------------------------------------------------------
// .Files, as Helm has them

type files map[string][]byte

func (f files) GetBytes(name string) []byte {
	if v, ok := f[name]; ok {
		return v
	}
	return []byte{}
}

func (f files) Get(name string) string { return string(f.GetBytes(name)) }

// Glob matches with path.Match per segment; "**" (any depth) is not needed here.
func (f files) Glob(pattern string) files {
	out := files{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		}
	}
	return out
}

func (f files) AsConfig() string {
	if f == nil {
		return ""
	}
	m := map[string]string{}
	for k, v := range f {
		m[path.Base(k)] = string(v)
	}
	return toYAML(m)
}

func (f files) AsSecrets() string {
	if f == nil {
		return ""
	}
	m := map[string]string{}
	for k, v := range f {
		m[path.Base(k)] = base64.StdEncoding.EncodeToString(v)
	}
	return toYAML(m)
}

func (f files) Lines(p string) []string {
	if f == nil || len(f[p]) == 0 {
		return []string{}
	}
	return strings.Split(strings.TrimSuffix(string(f[p]), "\n"), "\n")
}

// ---------------------------------------------------------------------------
// .Capabilities, as Helm has them

type versionSet []string

func (v versionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type kubeVersion struct{ Version, Major, Minor string }

func (k kubeVersion) String() string     { return k.Version }
func (k kubeVersion) GitVersion() string { return k.Version }

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions versionSet
	HelmVersion map[string]string
}

// The API versions of a plain cluster (what `helm template` assumes offline).
var defaultAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
	"networking.k8s.io/v1", "coordination.k8s.io/v1", "apiextensions.k8s.io/v1",
	"autoscaling/v2", "storage.k8s.io/v1", "admissionregistration.k8s.io/v1",
	"scheduling.k8s.io/v1", "discovery.k8s.io/v1", "events.k8s.io/v1",
}

func newCapabilities(version string, extra []string) (capabilities, error) {
	m := regexp.MustCompile(`^v?(\d+)\.(\d+)(\.\d+)?`).FindStringSubmatch(version)
	if m == nil {
		return capabilities{}, fmt.Errorf("--kube-version %q is not a version", version)
	}
	v := "v" + strings.TrimPrefix(version, "v")
	set := append(versionSet{}, defaultAPIVersions...)
	set = append(set, extra...)
	return capabilities{
		KubeVersion: kubeVersion{Version: v, Major: m[1], Minor: m[2]},
		APIVersions: set,
		HelmVersion: map[string]string{"Version": "v3-compatible"},
	}, nil
}

// ---------------------------------------------------------------------------
// Values: -f, --set, coalescing over the chart's defaults, the schema

// mergeMaps merges b over a, as Helm merges -f files and --set (maps deeply,
// anything else replaced).
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bv, ok := v.(map[string]any); ok {
			if av, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(av, bv)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce lays the chart's defaults under the user's values (Helm's
// CoalesceValues): a user's null deletes the default.
func coalesce(user, defaults map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range user {
		out[k] = v
	}
	for k, dv := range defaults {
		uv, present := out[k]
		switch {
		case !present:
			if dv != nil {
				out[k] = deepCopy(dv)
			}
		case uv == nil:
			delete(out, k)
		default:
			um, uok := uv.(map[string]any)
			dm, dok := dv.(map[string]any)
			if uok && dok {
				out[k] = coalesce(um, dm)
			} else if uok && !dok && dv != nil {
				fmt.Fprintf(os.Stderr, "warning: skipped value for %s: Not a table.\n", k)
			}
		}
	}
	for k, v := range out {
		if v == nil {
			delete(out, k)
		}
	}
	return out
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// parseSetValue types a --set value as Helm's strvals does: integers are
// int64, true/false booleans, null nil, anything else a string.
func parseSetValue(s string, asString bool) any {
	if asString {
		return s
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil && (s == "0" || !strings.HasPrefix(s, "0")) {
		return i
	}
	return s
}

var indexPattern = regexp.MustCompile(`^([^\[\]]+)((?:\[\d+\])*)$`)

// applySet puts one `a.b[0].c=v` (commas separate several) into vals.
func applySet(vals map[string]any, expr string, asString bool) error {
	for _, item := range splitUnescaped(expr, ',') {
		eq := strings.Index(item, "=")
		if eq < 0 {
			return fmt.Errorf("key %q has no value", item)
		}
		key, raw := item[:eq], strings.ReplaceAll(item[eq+1:], `\,`, ",")
		parts := splitUnescaped(key, '.')
		for i := range parts {
			parts[i] = strings.ReplaceAll(parts[i], `\.`, ".")
		}
		if err := setPath(vals, parts, parseSetValue(raw, asString)); err != nil {
			return fmt.Errorf("--set %s: %w", item, err)
		}
	}
	return nil
}

func splitUnescaped(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		if s[i] == sep {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func setPath(node map[string]any, parts []string, value any) error {
	m := indexPattern.FindStringSubmatch(parts[0])
	if m == nil {
		return fmt.Errorf("malformed key %q", parts[0])
	}
	name := m[1]
	var indices []int
	for _, ix := range regexp.MustCompile(`\d+`).FindAllString(m[2], -1) {
		n, _ := strconv.Atoi(ix)
		indices = append(indices, n)
	}
	last := len(parts) == 1
	if len(indices) == 0 {
		if last {
			node[name] = value
			return nil
		}
		child, ok := node[name].(map[string]any)
		if !ok {
			child = map[string]any{}
			node[name] = child
		}
		return setPath(child, parts[1:], value)
	}
	if len(indices) > 1 {
		return errors.New("nested list indices are not supported")
	}
	list, _ := node[name].([]any)
	for len(list) <= indices[0] {
		list = append(list, nil)
	}
	if last {
		list[indices[0]] = value
	} else {
		child, ok := list[indices[0]].(map[string]any)
		if !ok {
			child = map[string]any{}
			list[indices[0]] = child
		}
		if err := setPath(child, parts[1:], value); err != nil {
			return err
		}
	}
	node[name] = list
	return nil
}

// validateSchema is Helm 3's chartutil.ValidateAgainstSingleSchema.
func validateSchema(values map[string]any, schemaJSON []byte, chartName string) error {
	valuesData, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	valuesJSON, err := yaml.YAMLToJSON(valuesData)
	if err != nil {
		return err
	}
	if bytes.Equal(valuesJSON, []byte("null")) {
		valuesJSON = []byte("{}")
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schemaJSON),
		gojsonschema.NewBytesLoader(valuesJSON))
	if err != nil {
		return fmt.Errorf("values.schema.json: %w", err)
	}
	if result.Valid() {
		return nil
	}
	var sb strings.Builder
	for _, desc := range result.Errors() {
		fmt.Fprintf(&sb, "- %s\n", desc)
	}
	return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n%s",
		chartName, sb.String())
}

// ---------------------------------------------------------------------------
// The engine: Helm's template functions over sprig's

func toYAML(v any) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func mustToYAML(v any) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(str string) map[string]any {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(str string) []any {
	a := []any{}
	if err := yaml.Unmarshal([]byte(str), &a); err != nil {
		a = []any{err.Error()}
	}
	return a
}

func toJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func mustToJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func fromJSON(str string) map[string]any {
	m := map[string]any{}
	if err := json.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(str string) []any {
	a := []any{}
	if err := json.Unmarshal([]byte(str), &a); err != nil {
		a = []any{err.Error()}
	}
	return a
}

const (
	warnStart = "HELM_ERR_START"
	warnEnd   = "HELM_ERR_END"
)

var warnRegex = regexp.MustCompile(warnStart + `((?s).*)` + warnEnd)

func warnWrap(warn string) string { return warnStart + warn + warnEnd }

func includeFun(t *template.Template, included map[string]int) func(string, any) (string, error) {
	return func(name string, data any) (string, error) {
		if included[name] > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s: unable to execute template", name)
		}
		included[name]++
		var buf strings.Builder
		err := t.ExecuteTemplate(&buf, name, data)
		included[name]--
		return buf.String(), err
	}
}

func tplFun(parent *template.Template, included map[string]int) func(string, any) (string, error) {
	return func(tpl string, vals any) (string, error) {
		t, err := parent.Clone()
		if err != nil {
			return "", fmt.Errorf("cannot clone template: %w", err)
		}
		t.Option("missingkey=zero")
		t.Funcs(template.FuncMap{"include": includeFun(t, included), "tpl": tplFun(t, included)})
		t, err = t.New(parent.Name()).Parse(tpl)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", tpl, err)
		}
		var buf strings.Builder
		if err := t.Execute(&buf, vals); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", tpl, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
}

func funcMap(t *template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	included := map[string]int{}
	extra := template.FuncMap{
		"toYaml": toYAML, "mustToYaml": mustToYAML, "fromYaml": fromYAML, "fromYamlArray": fromYAMLArray,
		"toJson": toJSON, "mustToJson": mustToJSON, "fromJson": fromJSON, "fromJsonArray": fromJSONArray,
		"include": includeFun(t, included),
		"tpl":     tplFun(t, included),
		"required": func(warn string, val any) (any, error) {
			if val == nil {
				return val, errors.New(warnWrap(warn))
			}
			if s, ok := val.(string); ok && s == "" {
				return val, errors.New(warnWrap(warn))
			}
			return val, nil
		},
		"fail": func(msg string) (string, error) { return "", errors.New(warnWrap(msg)) },
		"lookup": func(string, string, string, string) (map[string]any, error) {
			return map[string]any{}, nil
		},
		"getHostByName": func(string) string { return "" },
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// execError rewrites a template error as Helm does: a `required` or `fail`
// message as "execution error at (<file>:<line>:<col>): <message>".
func execError(filename string, err error) error {
	var execErr template.ExecError
	if !errors.As(err, &execErr) {
		return err
	}
	tokens := strings.SplitN(err.Error(), ": ", 3)
	if len(tokens) != 3 {
		return fmt.Errorf("execution error in (%s): %w", filename, err)
	}
	if parts := warnRegex.FindStringSubmatch(tokens[2]); len(parts) >= 2 {
		return fmt.Errorf("execution error at (%s): %s", tokens[1], parts[1])
	}
	return err
}

type renderedFile struct {
	name string // "<chart>/templates/x.yaml"
	text string
}

func render(c *chart, top map[string]any) ([]renderedFile, string, error) {
	chartName := c.metadata["Name"].(string)
	t := template.New("gotpl")
	t.Option("missingkey=zero")
	t.Funcs(funcMap(t))
	names := make([]string, 0, len(c.templates))
	for rel := range c.templates {
		names = append(names, rel)
	}
	// Helm parses the deepest paths first, then by name.
	sort.Slice(names, func(i, j int) bool {
		ci, cj := strings.Count(names[i], "/"), strings.Count(names[j], "/")
		if ci != cj {
			return ci > cj
		}
		return names[i] > names[j]
	})
	for _, rel := range names {
		full := path.Join(chartName, rel)
		if _, err := t.New(full).Parse(c.templates[rel]); err != nil {
			return nil, "", fmt.Errorf("parse error in (%s): %w", full, err)
		}
	}
	sort.Strings(names)
	var out []renderedFile
	notes := ""
	for _, rel := range names {
		if strings.HasPrefix(path.Base(rel), "_") {
			continue
		}
		full := path.Join(chartName, rel)
		vals := map[string]any{}
		for k, v := range top {
			vals[k] = v
		}
		vals["Template"] = map[string]any{"Name": full, "BasePath": path.Join(chartName, "templates")}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, full, vals); err != nil {
			return nil, "", execError(full, err)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if path.Base(rel) == "NOTES.txt" {
			notes = text
			continue
		}
		out = append(out, renderedFile{full, text})
	}
	return out, notes, nil
}

// ---------------------------------------------------------------------------
// Manifests: split and sorted in Helm's install order

var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
	"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
	"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService",
}

var separator = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

type manifest struct {
	source, content, kind string
}

func splitManifests(files []renderedFile) ([]manifest, error) {
	var out []manifest
	for _, f := range files {
		for _, doc := range separator.Split(f.text, -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			content := strings.TrimSpace(doc)
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			var whole any
			if err := yaml.Unmarshal([]byte(content), &whole); err != nil {
				return nil, fmt.Errorf("YAML parse error on %s: %w", f.name, err)
			}
			if whole == nil {
				continue // only comments
			}
			if err := yaml.Unmarshal([]byte(content), &head); err != nil {
				return nil, fmt.Errorf("YAML parse error on %s: %w", f.name, err)
			}
			if head.Kind == "" || head.APIVersion == "" {
				return nil, fmt.Errorf("%s: a document without apiVersion and kind:\n%s", f.name, content)
			}
			out = append(out, manifest{source: f.name, content: content, kind: head.Kind})
		}
	}
	rank := func(kind string) int {
		for i, k := range installOrder {
			if k == kind {
				return i
			}
		}
		return len(installOrder)
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i].kind) < rank(out[j].kind) })
	return out, nil
}

// ---------------------------------------------------------------------------

func parseArgs(args []string) (options, error) {
	o := options{name: "release-name", namespace: "default", kubeVersion: "v1.32.0", revision: 1}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		value := func() (string, error) {
			if eq := strings.Index(arg, "="); eq >= 0 && strings.HasPrefix(arg, "--") {
				return arg[eq+1:], nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", arg)
			}
			i++
			return args[i], nil
		}
		flag := arg
		if eq := strings.Index(arg, "="); eq >= 0 && strings.HasPrefix(arg, "--") {
			flag = arg[:eq]
		}
		var err error
		var v string
		switch flag {
		case "--name":
			v, err = value()
			o.name = v
		case "--namespace", "-n":
			v, err = value()
			o.namespace = v
		case "-f", "--values":
			v, err = value()
			o.valueFiles = append(o.valueFiles, v)
		case "--set":
			v, err = value()
			o.sets = append(o.sets, v)
		case "--set-string":
			v, err = value()
			o.setStrings = append(o.setStrings, v)
		case "--kube-version":
			v, err = value()
			o.kubeVersion = v
		case "--api-versions", "-a":
			v, err = value()
			o.apiVersions = append(o.apiVersions, v)
		case "--revision":
			v, err = value()
			if err == nil {
				o.revision, err = strconv.Atoi(v)
			}
		case "--include-crds":
			o.includeCRDs = true
		case "--notes":
			o.notes = true
		case "--is-upgrade":
			o.isUpgrade = true
		default:
			if strings.HasPrefix(arg, "-") {
				return o, fmt.Errorf("unknown flag %s", arg)
			}
			if o.chartDir != "" {
				return o, fmt.Errorf("one chart directory, not %s and %s", o.chartDir, arg)
			}
			o.chartDir = arg
		}
		if err != nil {
			return o, err
		}
	}
	if o.chartDir == "" {
		return o, errors.New("usage: paci-helm-render [flags] CHART_DIR")
	}
	return o, nil
}

func run(o options) (string, error) {
	c, err := loadChart(o.chartDir)
	if err != nil {
		return "", err
	}
	chartName := c.metadata["Name"].(string)
	dns1123 := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	if len(o.name) > 53 || !dns1123.MatchString(o.name) {
		return "", fmt.Errorf("release name %q is invalid: a DNS-1123 label of at most 53 characters", o.name)
	}
	user := map[string]any{}
	for _, file := range o.valueFiles {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		vals := map[string]any{}
		if err := yaml.Unmarshal(data, &vals); err != nil {
			return "", fmt.Errorf("failed to parse %s: %w", file, err)
		}
		user = mergeMaps(user, vals)
	}
	for _, expr := range o.sets {
		if err := applySet(user, expr, false); err != nil {
			return "", fmt.Errorf("failed parsing --set data: %w", err)
		}
	}
	for _, expr := range o.setStrings {
		if err := applySet(user, expr, true); err != nil {
			return "", fmt.Errorf("failed parsing --set-string data: %w", err)
		}
	}
	values := coalesce(user, c.values)
	if c.schema != nil {
		if err := validateSchema(values, c.schema, chartName); err != nil {
			return "", err
		}
	}
	caps, err := newCapabilities(o.kubeVersion, o.apiVersions)
	if err != nil {
		return "", err
	}
	top := map[string]any{
		"Chart":        c.metadata,
		"Capabilities": caps,
		"Release": map[string]any{
			"Name": o.name, "Namespace": o.namespace, "Service": "Helm", "Revision": o.revision,
			"IsInstall": !o.isUpgrade, "IsUpgrade": o.isUpgrade,
		},
		"Values":    values,
		"Files":     c.files,
		"Subcharts": map[string]any{},
	}
	rendered, notes, err := render(c, top)
	if err != nil {
		return "", err
	}
	if o.notes {
		return notes, nil
	}
	manifests, err := splitManifests(rendered)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	if o.includeCRDs {
		var names []string
		for name := range c.crds {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			fmt.Fprintf(&sb, "---\n# Source: %s\n%s\n", path.Join(chartName, name),
				strings.TrimSpace(string(c.crds[name])))
		}
	}
	for _, m := range manifests {
		fmt.Fprintf(&sb, "---\n# Source: %s\n%s\n", m.source, m.content)
	}
	return sb.String(), nil
}

func main() {
	o, err := parseArgs(os.Args[1:])
	if err == nil {
		var out string
		out, err = run(o)
		if err == nil {
			fmt.Print(out)
			return
		}
	}
	fmt.Fprintf(os.Stderr, "Error: %v\n", err)
	os.Exit(1)
}
