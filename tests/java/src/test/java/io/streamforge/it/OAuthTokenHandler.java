package io.streamforge.it;

import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;

/**
 * A client-side `sasl.login.callback.handler.class` for OAUTHBEARER that hands the Java client
 * the signed JWT given as the JAAS option `token` (what a real handler would fetch from an
 * identity provider).
 */
public class OAuthTokenHandler implements AuthenticateCallbackHandler {
    private String token;

    @Override
    public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> entries) {
        token = (String) entries.get(0).getOptions().get("token");
    }

    @Override
    public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
        for (Callback c : callbacks) {
            if (!(c instanceof OAuthBearerTokenCallback cb)) {
                throw new UnsupportedCallbackException(c);
            }
            cb.token(parse(token));
        }
    }

    /** The claims the client itself uses (subject, exp, iat), read from the JWT's payload. */
    static OAuthBearerToken parse(String jwt) {
        String payload = new String(Base64.getUrlDecoder().decode(jwt.split("\\.")[1]));
        String sub = payload.replaceAll(".*\"sub\":\"([^\"]*)\".*", "$1");
        long exp = Long.parseLong(payload.replaceAll(".*\"exp\":(-?[0-9]+).*", "$1")) * 1000;
        long iat = Long.parseLong(payload.replaceAll(".*\"iat\":(-?[0-9]+).*", "$1")) * 1000;
        // An already expired test token still gets a future lifetime here, so the client's
        // refresh thread does not spin; the broker is what must refuse it.
        long lifetime = Math.max(exp, System.currentTimeMillis() + 60_000);
        return new OAuthBearerToken() {
            @Override public String value() { return jwt; }
            @Override public Set<String> scope() { return Set.of(); }
            @Override public long lifetimeMs() { return lifetime; }
            @Override public String principalName() { return sub; }
            @Override public Long startTimeMs() { return iat; }
        };
    }

    @Override
    public void close() {}
}
