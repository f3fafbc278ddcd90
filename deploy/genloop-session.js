// genloop-session.js -- the session key nginx-session.conf hashes on, so
// every turn of a conversation reaches the replica that holds its KV.
//
// In order: the X-Session-Id header, the body's "prompt_cache_key", the
// body's "user", else the client address. The body is read before the
// upstream is chosen (proxy_request_buffering on) and must sit in memory
// (client_body_buffer_size = client_max_body_size), or requestText is
// undefined and the header or address decides.
function session_key(r) {
    var header = r.headersIn['X-Session-Id'];
    if (header) return header;
    var body = r.requestText;
    if (body) {
        try {
            var j = JSON.parse(body);
            if (typeof j.prompt_cache_key === 'string' && j.prompt_cache_key) return 'k:' + j.prompt_cache_key;
            if (typeof j.user === 'string' && j.user) return 'u:' + j.user;
        } catch (e) {
            // not JSON: the replica answers 400; any replica will do
        }
    }
    return 'a:' + r.variables.remote_addr;
}

export default {session_key};
