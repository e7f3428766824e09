#!/usr/bin/env bash
# Makes the mutual-TLS Secrets that deploy/ (kubectl apply -k deploy/) mounts, with
# openssl and the kubectl of the current context, once: a Secret that exists is kept.
#
#   scripts/deploy-tls.sh [--namespace NS] [--worker-namespace NS]... [--days N]
#
# In NS (default paci-system): paci-ca (the CA: tls.crt, tls.key), paci-coordinator-tls
# (the coordinator's certificate for paci-coordinator.NS.svc, with ca.crt) and
# paci-operator-client-tls (the operator's client certificate). In each worker
# namespace (default: default; give one --worker-namespace per namespace TrainingJobs
# run in): paci-worker-tls, the workers' client certificate for that namespace
# (common name system:paci:worker:NS: the coordinator places them only on that
# namespace's jobs); and paci-client-tls, the certificate of that namespace's users
# (common name system:paci:tenant:NS: pacictl with it sees, submits and cancels only
# that namespace's jobs; Kubernetes' RBAC on Secrets says who may read it).
# Certificates are valid
# N days (default 365); to renew one, delete its Secret and run this again (the CA
# stays, so the others keep working). The Helm chart (helm/paci) does all this itself.
set -euo pipefail
NAMESPACE=paci-system
WORKER_NAMESPACES=()
DAYS=365
while (($#)); do
  case "$1" in
    --namespace) NAMESPACE=$2; shift 2 ;;
    --worker-namespace) WORKER_NAMESPACES+=("$2"); shift 2 ;;
    --days) DAYS=$2; shift 2 ;;
    *) echo "usage: $0 [--namespace NS] [--worker-namespace NS]... [--days N]" >&2; exit 2 ;;
  esac
done
((${#WORKER_NAMESPACES[@]})) || WORKER_NAMESPACES=(default)
for tool in openssl kubectl; do
  command -v "$tool" >/dev/null || { echo "deploy-tls: no $tool on PATH" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

exists() {  # NAMESPACE NAME
  kubectl get secret -n "$1" "$2" -o name >/dev/null 2>&1
}

for ns in "$NAMESPACE" "${WORKER_NAMESPACES[@]}"; do
  kubectl get namespace "$ns" -o name >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
done

# The CA: the one in the cluster, else a new one.
if exists "$NAMESPACE" paci-ca; then
  for key in tls.crt tls.key; do
    kubectl get secret -n "$NAMESPACE" paci-ca -o "jsonpath={.data.${key//./\\.}}" | base64 -d > "$work/ca.$key"
  done
  echo "deploy-tls: $NAMESPACE/paci-ca exists: signing with it"
else
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=paci CA" \
    -keyout "$work/ca.tls.key" -out "$work/ca.tls.crt" 2>/dev/null
  kubectl create secret tls -n "$NAMESPACE" paci-ca --cert="$work/ca.tls.crt" --key="$work/ca.tls.key" >/dev/null
  echo "deploy-tls: made $NAMESPACE/paci-ca"
fi

issue() {  # NAMESPACE SECRET COMMON_NAME EXTENSIONS [DNS_NAME]
  local ns=$1 name=$2 cn=$3 ext=$4 dns=${5:-}
  if exists "$ns" "$name"; then
    # Kept, unless it lacks a DNS name it must carry now (made by an older version).
    if [[ -z $dns ]] || kubectl get secret -n "$ns" "$name" -o 'jsonpath={.data.tls\.crt}' | base64 -d |
         openssl x509 -noout -ext subjectAltName 2>/dev/null | grep -q "DNS:$dns\b"; then
      echo "deploy-tls: $ns/$name exists: kept"
      return
    fi
    kubectl delete secret -n "$ns" "$name" >/dev/null
    echo "deploy-tls: $ns/$name lacks DNS:$dns: made anew"
  fi
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$cn" -keyout "$work/$name.key" -out "$work/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" > "$work/$name.ext"
  openssl x509 -req -in "$work/$name.csr" -CA "$work/ca.tls.crt" -CAkey "$work/ca.tls.key" -CAcreateserial \
    -days "$DAYS" -extfile "$work/$name.ext" -out "$work/$name.crt" 2>/dev/null
  kubectl create secret generic -n "$ns" "$name" --type=kubernetes.io/tls --from-file=tls.crt="$work/$name.crt" \
    --from-file=tls.key="$work/$name.key" --from-file=ca.crt="$work/ca.tls.crt" >/dev/null
  echo "deploy-tls: made $ns/$name ($cn, $DAYS days)"
}

service=paci-coordinator
issue "$NAMESPACE" paci-coordinator-tls "$service" \
  "subjectAltName=DNS:$service,DNS:$service.$NAMESPACE,DNS:$service.$NAMESPACE.svc,DNS:$service.$NAMESPACE.svc.cluster.local
extendedKeyUsage=serverAuth"
# The clients' common names are the identities the coordinator knows them by: a
# worker's binds it to its namespace (common/peer_identity.h).
issue "$NAMESPACE" paci-operator-client-tls system:paci:operator "extendedKeyUsage=clientAuth"
for ns in "${WORKER_NAMESPACES[@]}"; do
  # paci-worker.<namespace>: the name the workers check each other's certificates for
  # on the stage links (the operator's --worker_link_tls), so also a server's.
  issue "$ns" paci-worker-tls "system:paci:worker:$ns" "subjectAltName=DNS:paci-worker.$ns
extendedKeyUsage=serverAuth,clientAuth" "paci-worker.$ns"
  issue "$ns" paci-client-tls "system:paci:tenant:$ns" "extendedKeyUsage=clientAuth"
done

# The key the operator derives each TrainingJob's worker token from (its
# --worker_token_key_file): made once, kept.
if exists "$NAMESPACE" paci-operator-worker-token-key; then
  echo "deploy-tls: $NAMESPACE/paci-operator-worker-token-key exists: kept"
else
  openssl rand -hex 32 | tr -d '\n' > "$work/worker-token-key"
  kubectl create secret generic -n "$NAMESPACE" paci-operator-worker-token-key \
    --from-file=key="$work/worker-token-key" >/dev/null
  echo "deploy-tls: made $NAMESPACE/paci-operator-worker-token-key"
fi
