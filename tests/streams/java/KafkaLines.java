// Kafka's own Java client (kafka-clients, from the jars scripts/kafka.sh fetches), for the
// interoperability tests (tests/streams/test_kafka_codecs.py): a producer that is not
// aiokafka, with each compression codec Kafka defines, and a consumer that reads what the
// worker wrote. Run as a single source file: java -cp '<libs>/*' KafkaLines.java ...
//
//   produce BOOTSTRAP TOPIC       stdin lines "codec<TAB>key<TAB>value": one producer per
//                                 codec (compression.type); records keep line order (a
//                                 producer is flushed before another one sends)
//   consume BOOTSTRAP TOPIC N S   print the values of the topic from its start, one per
//                                 line, until N distinct values or S seconds without a
//                                 record (the worker is at-least-once: a rebalance can
//                                 publish a record again, identical)
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class KafkaLines {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("produce")) {
            produce(args[1], args[2]);
        } else {
            consume(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
        }
    }

    static void produce(String bootstrap, String topic) throws Exception {
        Map<String, KafkaProducer<String, String>> producers = new LinkedHashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        long sent = 0;
        KafkaProducer<String, String> previous = null;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", 3);
            KafkaProducer<String, String> producer = producers.computeIfAbsent(f[0], codec -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("compression.type", codec);
                p.put("linger.ms", "20");            // records batch together, as in production
                p.put("acks", "all");
                p.put("key.serializer", StringSerializer.class.getName());
                p.put("value.serializer", StringSerializer.class.getName());
                return new KafkaProducer<>(p);
            });
            if (previous != null && previous != producer) {
                previous.flush();
            }
            previous = producer;
            producer.send(new ProducerRecord<>(topic, f[1], f[2]));
            sent++;
        }
        for (KafkaProducer<String, String> producer : producers.values()) {
            producer.flush();
            producer.close();
        }
        System.err.println("sent " + sent);
    }

    static void consume(String bootstrap, String topic, int n, int idleSeconds) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic)) {
                tps.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            HashSet<String> distinct = new HashSet<>();
            long last = System.currentTimeMillis();
            while (distinct.size() < n && System.currentTimeMillis() - last < idleSeconds * 1000L) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println(r.value());
                    distinct.add(r.value());
                    last = System.currentTimeMillis();
                }
            }
        }
    }
}
