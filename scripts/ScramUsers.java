// SCRAM users of the secured dev broker (scripts/kafka.sh), set through the admin API after
// the broker started, so that no password is ever on a command line (issue 41, item 3):
//
//   javac -cp '<kafka libs>/*' -d DIR scripts/ScramUsers.java   (kafka.sh does it once per state)
//   java -cp 'DIR:<kafka libs>/*' ScramUsers ADMIN_CONFIG set|delete CLIENT_CONFIG...
//
// ADMIN_CONFIG: a Java admin client config for the broker's internal listener (mutual TLS
// with the broker's own certificate, the only principal besides admin that is a super
// user; the Java admin client does not send this request to controllers). Each
// CLIENT_CONFIG is a user's 0600 client config (sasl.username, sasl.password): `set`
// upserts that user's SCRAM-SHA-512 and SCRAM-SHA-256 credentials from it (a new password
// replaces the old one at once), `delete` removes both. Kafka's AlterUserScramCredentials
// (KIP-554) takes the password, salts and hashes it on the client, and sends only the
// salted form. Prints one line; exits 1 with the admin client's own error otherwise.
import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;

public class ScramUsers {
    static final int ITERATIONS = 8192;

    static Properties load(String path) throws Exception {
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(path)) {
            props.load(in);
        }
        return props;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3 || !(args[1].equals("set") || args[1].equals("delete"))) {
            System.err.println("usage: ScramUsers ADMIN_CONFIG set|delete CLIENT_CONFIG...");
            System.exit(2);
        }
        boolean set = args[1].equals("set");
        List<String> names = new ArrayList<>();
        List<String> passwords = new ArrayList<>();
        for (int i = 2; i < args.length; i++) {
            Properties client = load(args[i]);
            String user = client.getProperty("sasl.username");
            String password = client.getProperty("sasl.password");
            if (user == null || (set && (password == null || password.isEmpty()))) {
                System.err.println("ScramUsers: " + args[i] + " has no sasl.username / sasl.password");
                System.exit(2);
            }
            names.add(user);
            passwords.add(password);
        }
        Properties config = load(args[0]);
        config.putIfAbsent("default.api.timeout.ms", "60000");
        try (Admin admin = Admin.create(config)) {
            // one request per mechanism: a KRaft controller takes one alteration per user
            // and request (ScramControlManager: "A user credential cannot be altered twice
            // in the same request")
            for (ScramMechanism mechanism : new ScramMechanism[] {ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256}) {
                List<UserScramCredentialAlteration> changes = new ArrayList<>();
                for (int i = 0; i < names.size(); i++) {
                    changes.add(set
                        ? new UserScramCredentialUpsertion(names.get(i), new ScramCredentialInfo(mechanism, ITERATIONS),
                                                           passwords.get(i).getBytes(StandardCharsets.UTF_8))
                        : new UserScramCredentialDeletion(names.get(i), mechanism));
                }
                admin.alterUserScramCredentials(changes).all().get(90, TimeUnit.SECONDS);
            }
        } catch (ExecutionException e) {
            System.err.println("ScramUsers: the broker refused the change: " + e.getCause());
            System.exit(1);
        }
        System.out.println("SCRAM credentials " + (set ? "set" : "deleted") + " for " + String.join(", ", names));
    }
}
