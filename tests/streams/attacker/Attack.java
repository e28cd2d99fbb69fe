// What another local user (the tests run it as `nobody`) tries against a broker's ports
// with Kafka's own Java admin client and no credentials (tests/streams/test_attacks_broker.py):
//
//   java -cp 'KIT:KIT/*' Attack ACTION [ARG] key=value...
//
// ACTION: grant (ALLOW User:ANONYMOUS everything on every topic and group), retention TOPIC
// (retention.ms=1), scram USER (a SCRAM user with a password of the attacker's choosing).
// The key=value pairs are the admin client's config (bootstrap.servers or
// bootstrap.controllers, security.protocol, ...). Prints one line, "OK ACTION" or
// "REFUSED ACTION: <exception>: <message>", and exits 0 either way.
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class Attack {
    public static void main(String[] args) {
        String action = args[0];
        int first = action.equals("grant") ? 1 : 2;
        Properties config = new Properties();
        config.put("default.api.timeout.ms", "8000");
        config.put("request.timeout.ms", "4000");
        for (int i = first; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            config.put(kv[0], kv[1]);
        }
        try (Admin admin = Admin.create(config)) {
            if (action.equals("grant")) {
                AccessControlEntry all = new AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALL, AclPermissionType.ALLOW);
                admin.createAcls(List.of(
                    new AclBinding(new ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL), all),
                    new AclBinding(new ResourcePattern(ResourceType.GROUP, "*", PatternType.LITERAL), all)))
                    .all().get(10, TimeUnit.SECONDS);
            } else if (action.equals("retention")) {
                ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, args[1]);
                admin.incrementalAlterConfigs(Map.of(topic, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "1"), AlterConfigOp.OpType.SET))))
                    .all().get(10, TimeUnit.SECONDS);
            } else if (action.equals("scram")) {
                admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                    args[1], new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "chosen-by-the-attacker")))
                    .all().get(10, TimeUnit.SECONDS);
            }
            System.out.println("OK " + action);
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.out.println("REFUSED " + action + ": " + cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
    }
}
