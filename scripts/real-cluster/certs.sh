# Sourced by scripts/real-cluster.sh: the cluster's CA, serving and client certificates and
# kubeconfigs, made with openssl (ECDSA P-256, valid 10 days; a new set per `up`).

# sign NAME SUBJECT [SANS] [EXT]: $PKI/NAME.{key,crt} signed by the cluster CA.
sign() {
    local name="$1" subject="$2" sans="${3:-}" usage="${4:-clientAuth}"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        [[ -n "$sans" ]] && echo "subjectAltName=$sans"
    } >"$PKI/$name.ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 10 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

# kubeconfig NAME SERVER: $PKI/NAME.kubeconfig authenticating with $PKI/NAME.{crt,key}.
kubeconfig() {
    local name="$1" server="$2"
    cat >"$PKI/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: koord-real-cluster
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$name.crt")
    client-key-data: $(base64 -w0 "$PKI/$name.key")
contexts:
- name: koord-real-cluster
  context: {cluster: koord-real-cluster, user: $name}
current-context: koord-real-cluster
EOF
    chmod 600 "$PKI/$name.kubeconfig"
}

make_pki() {
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=koord-real-cluster-ca" -days 10 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$PKI/ca.crt" 2>/dev/null
    local svc="DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    sign apiserver "/CN=kube-apiserver" \
        "DNS:localhost,$svc,IP:127.0.0.1,IP:$NODE_IP,IP:$API_SERVICE_IP" serverAuth
    sign kubelet-serving "/CN=$NODE_NAME" "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP" serverAuth
    sign admin "/O=system:masters/CN=kubernetes-admin"
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    sign controller-manager "/CN=system:kube-controller-manager"
    sign scheduler "/CN=system:kube-scheduler"
    sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
    sign kube-proxy "/CN=system:kube-proxy"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key" 2>/dev/null
    openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    local server="https://$NODE_IP:6443" n
    for n in admin controller-manager scheduler kubelet kube-proxy; do kubeconfig "$n" "$server"; done
}
