"""Pod Security admission for the test API server (tests/kube/apiserver.py).

A cluster's kube-apiserver runs the PodSecurity admission plugin
(k8s.io/pod-security-admission): a namespace's labels

    pod-security.kubernetes.io/enforce: privileged | baseline | restricted
    pod-security.kubernetes.io/warn:    ...
    pod-security.kubernetes.io/audit:   ...
    (and -version: latest | v1.N for each)

make pods that break the level refused (enforce) or answered with a warning
(warn). This module does the same with the same wording, so that a pod a real
cluster would refuse is refused in the tests too:

* refused:  403 Forbidden, reason Forbidden, message
  `pods "NAME" is forbidden: violates PodSecurity "restricted:latest": REASON (DETAIL), ...`
* warned:   the request succeeds with a `Warning` header
  `would violate PodSecurity "baseline:latest": REASON (DETAIL), ...`
  (kubectl prints it as `Warning: ...`)

The checks are the library's, one function per check, each with its forbidden
reason and detail worded as the library words them; they run in the library's
order (baseline check IDs sorted, then restricted check IDs sorted; at
`restricted`, `capabilities_restricted`, `restrictedVolumes` and
`seccompProfile_restricted` replace `capabilities_baseline`, `hostPathVolumes`
and `seccompProfile_baseline`). Containers are visited as the library visits
them: initContainers, containers, ephemeralContainers.

baseline:   hostProcess, host namespaces, privileged, capabilities beyond the
            default set, hostPath volumes, hostPort, AppArmor (fields and
            annotations), SELinux options, /proc mount, seccomp Unconfined,
            sysctls beyond the safe set, host in probes and lifecycle handlers
restricted: all of baseline, plus volume types, allowPrivilegeEscalation,
            runAsNonRoot (pod-level true covers containers that leave it unset),
            runAsUser=0, seccompProfile RuntimeDefault/Localhost (pod-level
            covers containers that leave it unset), capabilities drop ALL / add
            only NET_BIND_SERVICE (Windows pods, spec.os.name=windows, are
            exempt from the last three as in the library)

Also as the real plugin does: a pod update is checked only when it is
significant (images, container counts, seccomp annotations); a namespace
with an invalid level or version label is refused on create (422, field
metadata.labels[...]) and an invalid enforce level is evaluated as
restricted; raising a namespace's enforce level answers with warnings that
name the existing pods that break it (they are not removed).

Simplifications, on purpose:
* `audit` labels are parsed and validated but nothing is audited (there is
  no audit log here).
* every policy version is evaluated as `latest` (the newest checks); the
  version label is still validated and shown in messages as written.
* no exemptions (usernames, runtime classes, namespaces) and no cluster-wide
  defaults: an unlabelled namespace, or one that does not exist, is
  privileged.
* the user-namespace relaxations (hostUsers: false) are not applied, as on a
  cluster where they are not enabled.
* only pods are checked, not pod templates of workload resources (which the
  real plugin only warns about anyway, and which this server does not serve).
"""

import json
import re

LABEL_PREFIX = "pod-security.kubernetes.io/"
MODES = ("enforce", "audit", "warn")
LEVELS = ("privileged", "baseline", "restricted")
VERSION_PATTERN = r"^v1\.([0-9]|[1-9][0-9]*)$"

LEVEL_ERROR = "must be one of privileged, baseline, restricted"
VERSION_ERROR = 'must be "latest" or "v1.x"'

# The default policy of a cluster without an AdmissionConfiguration.
DEFAULT_LEVEL_VERSION = ("privileged", "latest")


# ---------------------------------------------------------------------------
# Helpers, as the library has them


def join_quote(items):
    return "" if not items else '"' + '", "'.join(items) + '"'


def pluralize(singular, plural, count):
    return singular if count == 1 else plural


def go_quote(text):
    """Go's %q for a string."""
    return json.dumps(text, ensure_ascii=False)


def _get(obj, *keys):
    """obj[k1][k2]... or None where anything on the way is missing or null."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _dict(value):
    """A present (non-null) object field, as a dict; None when absent. A malformed
    value (the server does not validate pod specs) counts as an empty object."""
    if value is None:
        return None
    return value if isinstance(value, dict) else {}


def _set(obj, *keys):
    """Whether obj[k1]...[kn] is present and not null (a non-nil pointer in Go)."""
    return _get(obj, *keys) is not None


def _list(value):
    return value if isinstance(value, list) else []


def visit_containers(spec):
    """initContainers, containers, ephemeralContainers: every container, in that order."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in _list(spec.get(key)):
            if isinstance(container, dict):
                yield container


def _annotations(meta):
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def _name(container):
    return str(container.get("name", ""))


def _windows(spec):
    return _get(spec, "os", "name") == "windows"


class Forbidden:
    def __init__(self, reason, detail=""):
        self.reason, self.detail = reason, detail


# ---------------------------------------------------------------------------
# Baseline checks


def check_app_armor_profile(meta, spec):
    bad_setters, bad_values = [], set()
    profile = _dict(_get(spec, "securityContext", "appArmorProfile"))
    if profile is not None and profile.get("type") not in ("RuntimeDefault", "Localhost"):
        bad_setters.append("pod")
        bad_values.add(str(profile.get("type", "")))
    bad_containers = []
    for c in visit_containers(spec):
        profile = _dict(_get(c, "securityContext", "appArmorProfile"))
        if profile is not None and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            bad_containers.append(_name(c))
            bad_values.add(str(profile.get("type", "")))
    if bad_containers:
        bad_setters.append("%s %s" % (pluralize("container", "containers", len(bad_containers)),
                                      join_quote(bad_containers)))
    annotations = []
    for key, value in sorted(_annotations(meta).items()):
        if key.startswith("container.apparmor.security.beta.kubernetes.io/"):
            value = "" if value is None else str(value)
            if value and value != "runtime/default" and not value.startswith("localhost/"):
                annotations.append("%s=%s" % (key, go_quote(value)))
    values = sorted(bad_values) + sorted(annotations)
    if annotations:
        bad_setters.append(pluralize("annotation", "annotations", len(annotations)))
    if bad_setters:
        return Forbidden(pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values)),
                         "%s must not set AppArmor profile type to %s" % (" and ".join(bad_setters),
                                                                          join_quote(values)))
    return None


CAPABILITIES_BASELINE = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def check_capabilities_baseline(meta, spec):
    bad_containers, non_default = [], set()
    for c in visit_containers(spec):
        capabilities = _dict(_get(c, "securityContext", "capabilities"))
        if capabilities is None:
            continue
        valid = True
        for cap in _list(capabilities.get("add")):
            if cap not in CAPABILITIES_BASELINE:
                valid = False
                non_default.add(str(cap))
        if not valid:
            bad_containers.append(_name(c))
    if bad_containers:
        return Forbidden("non-default capabilities", "%s %s must not include %s in securityContext.capabilities.add"
                         % (pluralize("container", "containers", len(bad_containers)),
                            join_quote(bad_containers), join_quote(sorted(non_default))))
    return None


def check_host_namespaces(meta, spec):
    found = ["%s=true" % key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key) is True]
    if found:
        return Forbidden("host namespaces", ", ".join(found))
    return None


def check_host_path_volumes(meta, spec):
    volumes = [str(v.get("name", "")) for v in _list(spec.get("volumes"))
               if isinstance(v, dict) and _set(v, "hostPath")]
    if volumes:
        return Forbidden("hostPath volumes", "%s %s" % (pluralize("volume", "volumes", len(volumes)),
                                                        join_quote(volumes)))
    return None


def check_host_ports(meta, spec):
    bad_containers, ports = [], set()
    for c in visit_containers(spec):
        valid = True
        for port in _list(c.get("ports")):
            host_port = _get(port, "hostPort")
            if host_port not in (None, 0):
                valid = False
                ports.add(str(host_port))
        if not valid:
            bad_containers.append(_name(c))
    if bad_containers:
        return Forbidden("hostPort", "%s %s %s %s %s" % (
            pluralize("container", "containers", len(bad_containers)), join_quote(bad_containers),
            pluralize("uses", "use", len(bad_containers)), pluralize("hostPort", "hostPorts", len(ports)),
            ", ".join(sorted(ports))))
    return None


def check_host_probes_and_host_lifecycle(meta, spec):
    bad_containers, hosts = set(), set()

    def hosts_of(handler):
        found = []
        for kind in ("httpGet", "tcpSocket"):
            host = _get(handler, kind, "host")
            if host:
                found.append(str(host))
        return found

    for c in visit_containers(spec):
        handlers = [c.get("livenessProbe"), c.get("readinessProbe"), c.get("startupProbe"),
                    _get(c, "lifecycle", "postStart"), _get(c, "lifecycle", "preStop")]
        for handler in handlers:
            found = hosts_of(handler)
            if found:
                bad_containers.add(_name(c))
                hosts.update(found)
    if bad_containers:
        return Forbidden("probe or lifecycle host", "%s %s %s %s %s" % (
            pluralize("container", "containers", len(bad_containers)), join_quote(sorted(bad_containers)),
            pluralize("uses", "use", len(bad_containers)),
            pluralize("probe or lifecycle host", "probe or lifecycle hosts", len(hosts)),
            join_quote(sorted(hosts))))
    return None


def check_privileged(meta, spec):
    bad = [_name(c) for c in visit_containers(spec) if _get(c, "securityContext", "privileged") is True]
    if bad:
        return Forbidden("privileged", "%s %s must not set securityContext.privileged=true"
                         % (pluralize("container", "containers", len(bad)), join_quote(bad)))
    return None


def check_proc_mount(meta, spec):
    bad, types = [], set()
    for c in visit_containers(spec):
        proc_mount = _get(c, "securityContext", "procMount")
        if proc_mount is not None and proc_mount != "Default":
            bad.append(_name(c))
            types.add(str(proc_mount))
    if bad:
        return Forbidden("procMount", "%s %s must not set securityContext.procMount to %s"
                         % (pluralize("container", "containers", len(bad)), join_quote(bad),
                            join_quote(sorted(types))))
    return None


SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}


def check_se_linux_options(meta, spec):
    bad_setters, bad_types, flags = [], set(), {"user": False, "role": False}

    def valid(options):
        ok = True
        selinux_type = options.get("type") or ""
        if selinux_type not in SELINUX_TYPES:
            ok = False
            bad_types.add(str(selinux_type))
        for key in ("user", "role"):
            if options.get(key):
                ok = False
                flags[key] = True
        return ok

    options = _dict(_get(spec, "securityContext", "seLinuxOptions"))
    if options is not None and not valid(options):
        bad_setters.append("pod")
    bad_containers = []
    for c in visit_containers(spec):
        options = _dict(_get(c, "securityContext", "seLinuxOptions"))
        if options is not None and not valid(options):
            bad_containers.append(_name(c))
    if bad_containers:
        bad_setters.append("%s %s" % (pluralize("container", "containers", len(bad_containers)),
                                      join_quote(bad_containers)))
    if bad_setters:
        data = []
        if bad_types:
            data.append("%s %s" % (pluralize("type", "types", len(bad_types)), join_quote(sorted(bad_types))))
        if flags["user"]:
            data.append("user may not be set")
        if flags["role"]:
            data.append("role may not be set")
        return Forbidden("seLinuxOptions", "%s set forbidden securityContext.seLinuxOptions: %s"
                         % (" and ".join(bad_setters), "; ".join(data)))
    return None


def _valid_seccomp(profile):
    return profile.get("type") in ("RuntimeDefault", "Localhost")


def check_seccomp_profile_baseline(meta, spec):
    bad_setters, bad_values = [], set()
    profile = _dict(_get(spec, "securityContext", "seccompProfile"))
    if profile is not None and not _valid_seccomp(profile):
        bad_setters.append("pod")
        bad_values.add(str(profile.get("type") or ""))
    bad_containers = []
    for c in visit_containers(spec):
        profile = _dict(_get(c, "securityContext", "seccompProfile"))
        if profile is not None and not _valid_seccomp(profile):
            bad_containers.append(_name(c))
            bad_values.add(str(profile.get("type") or ""))
    if bad_containers:
        bad_setters.append("%s %s" % (pluralize("container", "containers", len(bad_containers)),
                                      join_quote(bad_containers)))
    if bad_setters:
        return Forbidden("seccompProfile", "%s must not set securityContext.seccompProfile.type to %s"
                         % (" and ".join(bad_setters), join_quote(sorted(bad_values))))
    return None


SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",                                     # policy v1.27
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",              # policy v1.29
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",                               # policy v1.32
}


def check_sysctls(meta, spec):
    forbidden = [str(s.get("name", "")) for s in _list(_get(spec, "securityContext", "sysctls"))
                 if isinstance(s, dict) and s.get("name") not in SAFE_SYSCTLS]
    if forbidden:
        return Forbidden("forbidden sysctls", ", ".join(forbidden))
    return None


def check_windows_host_process(meta, spec):
    bad = [_name(c) for c in visit_containers(spec)
           if _get(c, "securityContext", "windowsOptions", "hostProcess") is True]
    setters = []
    if _get(spec, "securityContext", "windowsOptions", "hostProcess") is True:
        setters.append("pod")
    if bad:
        setters.append("%s %s" % (pluralize("container", "containers", len(bad)), join_quote(bad)))
    if setters:
        return Forbidden("hostProcess", "%s must not set securityContext.windowsOptions.hostProcess=true"
                         % " and ".join(setters))
    return None


# ---------------------------------------------------------------------------
# Restricted checks


def check_allow_privilege_escalation(meta, spec):
    if _windows(spec):
        return None
    bad = [_name(c) for c in visit_containers(spec)
           if _get(c, "securityContext", "allowPrivilegeEscalation") is not False]
    if bad:
        return Forbidden("allowPrivilegeEscalation != false",
                         "%s %s must set securityContext.allowPrivilegeEscalation=false"
                         % (pluralize("container", "containers", len(bad)), join_quote(bad)))
    return None


def check_capabilities_restricted(meta, spec):
    if _windows(spec):
        return None
    missing_drop_all, adding_forbidden, forbidden = [], [], set()
    for c in visit_containers(spec):
        capabilities = _dict(_get(c, "securityContext", "capabilities"))
        if capabilities is None:
            missing_drop_all.append(_name(c))
            continue
        if "ALL" not in _list(capabilities.get("drop")):
            missing_drop_all.append(_name(c))
        added = [str(cap) for cap in _list(capabilities.get("add")) if cap != "NET_BIND_SERVICE"]
        if added:
            forbidden.update(added)
            adding_forbidden.append(_name(c))
    details = []
    if missing_drop_all:
        details.append('%s %s must set securityContext.capabilities.drop=["ALL"]'
                       % (pluralize("container", "containers", len(missing_drop_all)),
                          join_quote(missing_drop_all)))
    if adding_forbidden:
        details.append("%s %s must not include %s in securityContext.capabilities.add"
                       % (pluralize("container", "containers", len(adding_forbidden)),
                          join_quote(adding_forbidden), join_quote(sorted(forbidden))))
    if details:
        return Forbidden("unrestricted capabilities", "; ".join(details))
    return None


ALLOWED_VOLUME_SOURCES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                          "projected", "secret")
RESTRICTED_VOLUME_SOURCES = ("hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi",
                             "glusterfs", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile",
                             "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "portworxVolume",
                             "scaleIO", "storageos")


def check_restricted_volumes(meta, spec):
    bad_volumes, bad_types = [], set()
    for volume in _list(spec.get("volumes")):
        if not isinstance(volume, dict):
            continue
        sources = [key for key, value in volume.items() if key != "name" and value is not None]
        # A volume with no source at all is defaulted to an emptyDir.
        if not sources or any(_set(volume, key) for key in ALLOWED_VOLUME_SOURCES):
            continue
        bad_volumes.append(str(volume.get("name", "")))
        bad_types.add(next((key for key in RESTRICTED_VOLUME_SOURCES if _set(volume, key)), "unknown"))
    if bad_volumes:
        return Forbidden("restricted volume types", "%s %s %s %s %s" % (
            pluralize("volume", "volumes", len(bad_volumes)), join_quote(bad_volumes),
            pluralize("uses", "use", len(bad_volumes)),
            pluralize("restricted volume type", "restricted volume types", len(bad_types)),
            join_quote(sorted(bad_types))))
    return None


def check_run_as_non_root(meta, spec):
    bad_setters, pod_non_root = [], False
    pod_value = _get(spec, "securityContext", "runAsNonRoot")
    if pod_value is not None:
        if pod_value is not True:
            bad_setters.append("pod")
        else:
            pod_non_root = True
    explicitly_bad, implicitly_bad = [], []
    for c in visit_containers(spec):
        value = _get(c, "securityContext", "runAsNonRoot")
        if value is not None:
            if value is not True:
                explicitly_bad.append(_name(c))
        elif not pod_non_root:
            implicitly_bad.append(_name(c))
    if explicitly_bad:
        bad_setters.append("%s %s" % (pluralize("container", "containers", len(explicitly_bad)),
                                      join_quote(explicitly_bad)))
    if bad_setters:
        return Forbidden("runAsNonRoot != true", "%s must not set securityContext.runAsNonRoot=false"
                         % " and ".join(bad_setters))
    if implicitly_bad:
        return Forbidden("runAsNonRoot != true", "pod or %s %s must set securityContext.runAsNonRoot=true"
                         % (pluralize("container", "containers", len(implicitly_bad)),
                            join_quote(implicitly_bad)))
    return None


def check_run_as_user(meta, spec):
    bad_setters = []
    if _get(spec, "securityContext", "runAsUser") == 0 and \
            not isinstance(_get(spec, "securityContext", "runAsUser"), bool):
        bad_setters.append("pod")
    bad = [_name(c) for c in visit_containers(spec)
           if _get(c, "securityContext", "runAsUser") == 0
           and not isinstance(_get(c, "securityContext", "runAsUser"), bool)]
    if bad:
        bad_setters.append("%s %s" % (pluralize("container", "containers", len(bad)), join_quote(bad)))
    if bad_setters:
        return Forbidden("runAsUser=0", "%s must not set runAsUser=0" % " and ".join(bad_setters))
    return None


def check_seccomp_profile_restricted(meta, spec):
    if _windows(spec):
        return None
    bad_setters, bad_values, pod_set = [], set(), False
    profile = _dict(_get(spec, "securityContext", "seccompProfile"))
    if profile is not None:
        if not _valid_seccomp(profile):
            bad_setters.append("pod")
            bad_values.add(str(profile.get("type") or ""))
        else:
            pod_set = True
    explicitly_bad, implicitly_bad = [], []
    for c in visit_containers(spec):
        profile = _dict(_get(c, "securityContext", "seccompProfile"))
        if profile is not None:
            if not _valid_seccomp(profile):
                explicitly_bad.append(_name(c))
                bad_values.add(str(profile.get("type") or ""))
        elif not pod_set:
            implicitly_bad.append(_name(c))
    if explicitly_bad:
        bad_setters.append("%s %s" % (pluralize("container", "containers", len(explicitly_bad)),
                                      join_quote(explicitly_bad)))
    if bad_setters:
        return Forbidden("seccompProfile", "%s must not set securityContext.seccompProfile.type to %s"
                         % (" and ".join(bad_setters), join_quote(sorted(bad_values))))
    if implicitly_bad:
        return Forbidden("seccompProfile", 'pod or %s %s must set securityContext.seccompProfile.type to '
                         '"RuntimeDefault" or "Localhost"'
                         % (pluralize("container", "containers", len(implicitly_bad)),
                            join_quote(implicitly_bad)))
    return None


# ---------------------------------------------------------------------------
# The registry: check ID -> (level, function, the baseline check IDs it replaces)

CHECKS = {
    "appArmorProfile": ("baseline", check_app_armor_profile, ()),
    "capabilities_baseline": ("baseline", check_capabilities_baseline, ()),
    "hostNamespaces": ("baseline", check_host_namespaces, ()),
    "hostPathVolumes": ("baseline", check_host_path_volumes, ()),
    "hostPorts": ("baseline", check_host_ports, ()),
    "hostProbesAndHostLifecycle": ("baseline", check_host_probes_and_host_lifecycle, ()),
    "privileged": ("baseline", check_privileged, ()),
    "procMount": ("baseline", check_proc_mount, ()),
    "seLinuxOptions": ("baseline", check_se_linux_options, ()),
    "seccompProfile_baseline": ("baseline", check_seccomp_profile_baseline, ()),
    "sysctls": ("baseline", check_sysctls, ()),
    "windowsHostProcess": ("baseline", check_windows_host_process, ()),
    "allowPrivilegeEscalation": ("restricted", check_allow_privilege_escalation, ()),
    "capabilities_restricted": ("restricted", check_capabilities_restricted, ("capabilities_baseline",)),
    "restrictedVolumes": ("restricted", check_restricted_volumes, ("hostPathVolumes",)),
    "runAsNonRoot": ("restricted", check_run_as_non_root, ()),
    "runAsUser": ("restricted", check_run_as_user, ()),
    "seccompProfile_restricted": ("restricted", check_seccomp_profile_restricted, ("seccompProfile_baseline",)),
}


def _ordered(level):
    """The check functions of a level in the library's order (Go sorts IDs bytewise, as Python does)."""
    baseline = sorted(i for i, (lvl, _, _) in CHECKS.items() if lvl == "baseline")
    restricted = sorted(i for i, (lvl, _, _) in CHECKS.items() if lvl == "restricted")
    if level == "baseline":
        return [CHECKS[i][1] for i in baseline]
    overridden = {o for i in restricted for o in CHECKS[i][2]}
    return [CHECKS[i][1] for i in baseline + restricted if i not in overridden]


ORDERED = {"baseline": _ordered("baseline"), "restricted": _ordered("restricted")}


def evaluate(level, pod):
    """The failed checks of `pod` at `level`, as [Forbidden], in the library's order."""
    if level not in ORDERED:
        return []
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    return [result for result in (check(meta, spec) for check in ORDERED[level]) if result is not None]


def forbidden_detail(results):
    """AggregateCheckResult.ForbiddenDetail: `reason (detail), reason, ...`."""
    return ", ".join("%s (%s)" % (r.reason, r.detail) if r.detail else r.reason for r in results)


def forbidden_reason(results):
    return ", ".join(r.reason for r in results)


# ---------------------------------------------------------------------------
# Namespace labels -> policy


def policy_to_evaluate(labels):
    """({mode: (level, version)}, [(label, value, detail)]): api.PolicyToEvaluate.

    An invalid enforce level is evaluated as restricted (fail closed); an invalid
    warn or audit level as privileged (fail open); an invalid version as latest."""
    policy = {mode: DEFAULT_LEVEL_VERSION for mode in MODES}
    errors = []
    labels = labels if isinstance(labels, dict) else {}
    for mode in MODES:
        level, version = policy[mode]
        key = LABEL_PREFIX + mode
        if key in labels:
            level = labels[key]
            if level not in LEVELS:
                errors.append((key, level, LEVEL_ERROR))
                level = "restricted" if mode == "enforce" else "privileged"
        key = LABEL_PREFIX + mode + "-version"
        if key in labels:
            version = labels[key]
            if version != "latest" and not (isinstance(version, str) and re.match(VERSION_PATTERN, version)):
                errors.append((key, version, VERSION_ERROR))
                version = "latest"
        policy[mode] = (level, version)
    return policy, errors


def level_version(lv):
    return "%s:%s" % lv


# ---------------------------------------------------------------------------
# Admission


def admit_pod(namespace_labels, pod, old_pod=None):
    """Admission of a pod create (old_pod None) or update.

    Returns (refusal, warnings): refusal is None or the message after
    `pods "NAME" is forbidden: `; warnings are Warning header texts."""
    policy, _errors = policy_to_evaluate(namespace_labels)
    if all(policy[mode][0] == "privileged" for mode in MODES) and not _errors:
        return None, []
    if old_pod is not None and not significant_pod_update(pod, old_pod):
        return None, []
    cached = {}
    enforce = policy["enforce"]
    cached[enforce[0]] = evaluate(enforce[0], pod)
    if cached[enforce[0]]:
        return "violates PodSecurity %s: %s" % (go_quote(level_version(enforce)),
                                                 forbidden_detail(cached[enforce[0]])), []
    warn = policy["warn"]
    results = cached[warn[0]] if warn[0] in cached else evaluate(warn[0], pod)
    if results:
        return None, ["would violate PodSecurity %s: %s" % (go_quote(level_version(warn)),
                                                             forbidden_detail(results))]
    return None, []


SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"


def significant_pod_update(pod, old_pod):
    """isSignificantPodUpdate: only these changes make an update be evaluated again."""
    annotations = _annotations(pod.get("metadata"))
    old_annotations = _annotations(old_pod.get("metadata"))
    if annotations.get(SECCOMP_POD_ANNOTATION) != old_annotations.get(SECCOMP_POD_ANNOTATION):
        return True
    spec, old_spec = _dict(pod.get("spec")) or {}, _dict(old_pod.get("spec")) or {}

    def container_changed(c, old):
        key = SECCOMP_CONTAINER_ANNOTATION + _name(c)
        return c.get("image") != old.get("image") or annotations.get(key) != old_annotations.get(key)

    for key in ("containers", "initContainers"):
        new, old = _list(spec.get(key)), _list(old_spec.get(key))
        if len(new) != len(old):
            return True
        if any(container_changed(c, o) for c, o in zip(new, old) if isinstance(c, dict) and isinstance(o, dict)):
            return True
    old_ephemeral = {_name(c): c for c in _list(old_spec.get("ephemeralContainers")) if isinstance(c, dict)}
    for c in _list(spec.get("ephemeralContainers")):
        if not isinstance(c, dict):
            continue
        old = old_ephemeral.get(_name(c))
        if old is None or container_changed(c, old):
            return True
    return False


def label_errors(labels, old_labels=None):
    """The invalid Pod Security labels of a namespace being created (old_labels None)
    or updated (only when they changed the errors), as [(field, value, detail)]."""
    _policy, errors = policy_to_evaluate(labels)
    if not errors:
        return []
    if old_labels is not None:
        _old_policy, old_errors = policy_to_evaluate(old_labels)
        if old_errors and _render(old_errors) == _render(errors):
            return []
    return [("metadata.labels[%s]" % key, value, detail) for key, value, detail in errors]


def _render(errors):
    return "; ".join("%s=%r: %s" % e for e in errors)


def namespace_update_warnings(name, labels, old_labels, pods):
    """Warnings for a namespace update that raises its enforce level: which of its
    existing pods (`pods`) would be refused now (ValidateNamespace)."""
    new, _ = policy_to_evaluate(labels)
    old, _ = policy_to_evaluate(old_labels)
    enforce, old_enforce = new["enforce"], old["enforce"]
    if enforce == old_enforce or enforce[0] == "privileged":
        return []
    order = {"privileged": 0, "baseline": 1, "restricted": 2}
    if enforce[1] == old_enforce[1] and order[enforce[0]] <= order.get(old_enforce[0], 0):
        return []
    counts, first, warnings = {}, {}, []
    for pod in pods:
        results = evaluate(enforce[0], pod)
        if not results:
            continue
        warning = forbidden_reason(results)
        pod_name = str(_get(pod, "metadata", "name") or "")
        if warning not in counts:
            warnings.append(warning)
            counts[warning], first[warning] = 0, pod_name
        elif pod_name < first[warning]:
            first[warning] = pod_name
        counts[warning] += 1
    if not warnings:
        return []
    decorated = []
    for warning in warnings:
        count, pod_name = counts[warning], first[warning]
        if count == 1:
            decorated.append("%s: %s" % (pod_name, warning))
        elif count == 2:
            decorated.append("%s (and 1 other pod): %s" % (pod_name, warning))
        else:
            decorated.append("%s (and %d other pods): %s" % (pod_name, count - 1, warning))
    return ["existing pods in namespace %s violate the new PodSecurity enforce level %s"
            % (go_quote(name), go_quote(level_version(enforce)))] + sorted(decorated)
